"""Every output a reader sees, built from the figures: the ``analyze`` and leaderboard results
(``analysis``, ``pointwise_analysis``, ``leaderboard``, ``recommendation``), the terminal table
(``console_table``), the report card page (``report_card`` and its sections), the experiment's summary
(``experiment_summary``), the statements a judge earns (``trust``) and the plots."""
