"""The run store: a run folder's paths named once (``layout``), written atomically and found again
on rerun (``store``), a full disk recognized wherever it surfaces (``diskfull``) and a Ctrl-C honoured
after the batch being committed (``interrupts``)."""
