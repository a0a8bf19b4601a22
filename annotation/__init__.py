"""The human annotation loop on Label Studio (see docs/annotation.md).

selection (which pairs to label) -> labelstudio (push / pull) -> store (the labels ledger kept with the
experiment) -> feedback (merge, agreement, EO/DBG recomputed) -> sync (the whole round, for the flow).
Pure logic (selection, keys, store, feedback) never imports the Label Studio SDK.
"""
