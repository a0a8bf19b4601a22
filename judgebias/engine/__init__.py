"""The judging engine: pairs judged in both presentation orders (``pairwise``), responses scored
(``pointwise``), repeats of a sampling judge (``repeats``), a judge's perplexity and attention
(``perplexity``, ``attention``), and the work cut into chunks (``chunks``) for worker processes
(``workers``)."""
