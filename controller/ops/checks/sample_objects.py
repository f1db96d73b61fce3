"""Every object the platform code creates for one run, built by that code for a sample roster, so
the static checks validate what a cluster would receive, not a hand-written copy of it."""

from __future__ import annotations

import datetime

from controller.agents.runtime import Resources
from controller.agents.scripted import scripted
from controller.incluster import access, controller_job
from controller.incluster import export_job as ledger_export
from controller.platforms.kubernetes import objects, rbac, routing
from controller.platforms.kubernetes.images import ImageMap
from controller.platforms.kubernetes.kube import Obj
from controller.platforms.kubernetes.settings import KubernetesSettings

SAMPLE_RUN = "sr-" + "5a" * 16
"""A run id as the platform draws them (sr- and 32 hex digits), which also names the namespace."""
SAMPLE_IMAGE = "registry.example/society/scripted@sha256:" + "ab" * 32
SAMPLE_UID = "00000000-0000-4000-8000-000000000000"


def sample_run_objects(
    run_id: str = SAMPLE_RUN, *, settings: KubernetesSettings | None = None
) -> list[Obj]:
    """The namespace, identities, queue, Workload, Secrets, Sandboxes, Service, policies,
    controller Job and export Job of a run with two agent shapes, one with files, under
    ``settings`` (the worker's, e.g. read from a rendered chart's environment)."""
    settings = settings or KubernetesSettings()
    credentials_namespace = settings.credentials_namespace
    roster = {
        "alice": scripted(image=SAMPLE_IMAGE, files={"notes.txt": "hello"}),
        "bob": scripted(image=SAMPLE_IMAGE, resources=Resources(cpu=0.5, memory_mib=256)),
    }
    owner = {**objects.owner(run_id)}
    owner["metadata"] = {**owner["metadata"], "uid": SAMPLE_UID}
    shutdown = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    router_port = 7300
    prepared: list[Obj] = [  # by the run worker's prepare (namespace.py), not owned
        objects.namespace(run_id),
        objects.owner(run_id),
        rbac.worker_binding(run_id, rbac.worker_subject()),
        rbac.controller_account(run_id),
        rbac.controller_binding(run_id),
        rbac.credentials_binding(run_id, credentials_namespace),
        access.ledger_claim(run_id, "ledger", storage_class=None, size="1Gi"),
    ]
    made: list[Obj] = [  # by the session and the controller Job, owned by the run's owner
        objects.local_queue(run_id, settings.cluster_queue),
        objects.workload(run_id, objects.pod_sets(roster)),
        objects.router_ca(run_id, b"-----BEGIN CERTIFICATE-----\n"),
        routing.router_service(run_id, router_port, [7310]),
        *routing.network_policies(
            run_id, controller_ports=[router_port, 7310], bridge_ports=[7400]
        ),
        access.runspec_configmap(run_id, "negotiation.py", b"SPEC = None\n"),
        access.controller_job(
            run_id,
            image=SAMPLE_IMAGE,
            module_name="negotiation.py",
            seed=7,
            profile="gke",
            cluster_queue=settings.cluster_queue,
            active_deadline_s=86400,
            ledger_claim="ledger",
            environment=controller_job._forwarded(settings, ImageMap()),
            node_selector={"society.run/pool": "system"},
            signing_key_secret=access.SIGNING_SECRET,
        ),
        access.signing_key_secret(run_id, b"-----BEGIN PRIVATE KEY-----\n"),
    ]
    for agent, descriptor in roster.items():
        made.append(objects.agent_secrets(run_id, agent, b"{}", descriptor.files))
        made.append(
            objects.sandbox(
                run_id,
                agent,
                descriptor,
                router_url=f"https://{routing.router_host(run_id)}:{router_port}",
                seed=7,
                shutdown_at=shutdown,
                placement=settings.agent_placement,
                host_aliases=routing.host_aliases(run_id, "10.96.0.10"),
            )
        )
    made += [  # by the run worker's cleanup, when it exports (ledger_export)
        ledger_export.token_secret(run_id, "ya29.sample"),
        ledger_export.export_policy(run_id, None),
        ledger_export.export_job(
            run_id,
            image=SAMPLE_IMAGE,
            claim="ledger",
            destination=f"gs://sample-ledgers/{run_id}/",
            token=True,
            emulator=None,
            node_selector={"society.run/pool": "system"},
        ),
    ]
    return prepared + [objects.owned(obj, owner) for obj in made]
