"""The controller Job's entrypoint: run the mounted RunSpec once, in-cluster, print the result.

``python -m controller.platform.kubernetes.incluster``; everything comes from the Job's
environment (``access.controller_job``): ``SOCIETY_RUN_ID``, ``SOCIETY_RUN_MODULE``,
``SOCIETY_RUN_SEED``, ``SOCIETY_PROFILE``, ``SOCIETY_ARTIFACT_ROOT`` and the cluster settings.
The exit status is 0 for a successful program, 1 otherwise.
"""

from __future__ import annotations

import os
import sys

import anyio

from controller.run import RunRequest, execute_run


def main() -> int:
    env = os.environ
    request = RunRequest(
        module_path=env["SOCIETY_RUN_MODULE"],
        run_id=env["SOCIETY_RUN_ID"],
        profile=env.get("SOCIETY_PROFILE", "kubernetes"),
        artifact_root=env.get("SOCIETY_ARTIFACT_ROOT", "/var/lib/society/artifacts"),
        seed=int(env["SOCIETY_RUN_SEED"]) if env.get("SOCIETY_RUN_SEED") else None,
    )
    result = anyio.run(execute_run, request)
    print(result.model_dump_json(by_alias=True), flush=True)
    return 0 if result.exit == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
