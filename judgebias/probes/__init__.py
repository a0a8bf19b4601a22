"""Active probes: inputs changed on purpose to see what moves a judge."""
