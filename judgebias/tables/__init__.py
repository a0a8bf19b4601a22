"""The judgment table and its readers: the records judging makes (``records``), the pairwise table
(``pairwise``) and the pointwise one (``pointwise``), their files read and written (``files``), read
column-wise for analysis (``for_analysis``, ``parquet_columns``, ``jsonl_columns``, ``columns``), and
what a row's values mean (``labels``, ``folding``, ``exclusions``)."""
