"""How the flows are run: task runners (threads, Dask), the environment set before Prefect is
imported, the ephemeral server's guard, work-pool deployments."""
