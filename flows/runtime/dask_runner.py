"""prefect-dask's runner, made to report to the flow's own Prefect API from local worker processes.

Without a configured ``PREFECT_API_URL`` a flow runs against a temporary server that Prefect
starts in the flow's process. Local Dask worker processes do not inherit it: each then starts a
temporary server of its own (~8 s and ~240 MB per worker) and their task runs land in throwaway
databases instead of the flow's. This runner passes the flow's API URL to the local cluster's
workers through their environment. Workers of an existing cluster (``address``) must be started
with ``PREFECT_API_URL`` set by whoever starts them.
"""

from __future__ import annotations

from prefect_dask import DaskTaskRunner


def _flow_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return url
    try:  # the temporary server of this process, if one is running (a singleton per port)
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer._instances.get(None)
    except Exception:  # an internal detail; without it we only lose the optimisation
        return None
    if server is not None and server.server_process is not None:
        return server.api_url
    return None


class ApiAwareDaskTaskRunner(DaskTaskRunner):
    def __enter__(self):
        if self.address is None and self._cluster is None:
            url = _flow_api_url()
            if url:
                env = dict(self.cluster_kwargs.get("env") or {})
                env.setdefault("PREFECT_API_URL", url)
                self.cluster_kwargs = {**self.cluster_kwargs, "env": env}
        return super().__enter__()
