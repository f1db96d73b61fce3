"""``society cluster up|down --profile kind``: the kind profile's cluster in one command, gone in
one; a progress line per install step on stderr, and the profile file's path on stdout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1  # a step failed; the steps before it stay done (run `up` again to resume)
EXIT_SETUP = 2  # nothing was changed: a prerequisite is missing, or the options are wrong

UP_HELP = """\
Create (or reuse) the kind cluster of kind/cluster.yaml and install everything a run needs:
a local registry, the pinned Kueue and Agent Sandbox, the images (scripts/build-images.sh),
a Temporal dev server in the cluster, the agents' queue sized from the agents' nodes, the
credentials namespace and the chart (helm/society-runner). Idempotent: run it again to resume
or to update. Afterwards `society run MODULE.py --profile kind` needs no environment: it reads
the profile file written under the artifact root (.cluster/kind.json).

--existing-kubeconfig PATH installs into an existing cluster instead (no Docker, kind or
internet needed): no cluster is created, no registry runs, the images are imported into each
node's containerd given by --node-containerd, and Kueue and Agent Sandbox must already be
served there (they are checked, not installed). Each run's ledger then goes to a volume of
--ledger-storage-class (else it goes with the controller's pod), copied home when
--ledger-volumes says where this machine sees the nodes' volumes.

On kind, each run's ledger is written to a volume of the StorageClass `society-ledgers` (kind's
local-path provisioner, reclaimPolicy Retain), which kind mounts from .cluster/kind-volumes
under the artifact root, and the run directory is copied home to the artifact root when the
run ends, so `society ledger verify` reads it as it reads a local run's."""


def add_commands(subparsers: Any) -> None:
    cluster = subparsers.add_parser(
        "cluster", help="stand a profile's cluster up, or take it down", description=UP_HELP
    )
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="create or reuse the cluster and install what runs need (idempotent)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=UP_HELP,
    )
    _common(up)
    up.add_argument(
        "--existing-kubeconfig",
        type=Path,
        default=None,
        metavar="PATH",
        help="install into this kubeconfig's cluster instead of creating a kind cluster",
    )
    up.add_argument("--context", default=None, help="the kubeconfig context (with the above)")
    up.add_argument(
        "--agent-nodes",
        default="society.run/pool=agents",
        metavar="KEY=VALUE[,...]",
        help="the agents' node pool: the queue is sized from these nodes' allocatable CPU and "
        "memory, and agents' pods are placed on them (default: %(default)s, kind/cluster.yaml's)",
    )
    up.add_argument(
        "--node-containerd",
        action="append",
        default=[],
        metavar="SOCKET",
        help="with --existing-kubeconfig: a node's containerd socket to import the images into "
        "(repeat per node); `ctr` must be on PATH",
    )
    up.add_argument(
        "--ledger-storage-class",
        default=None,
        metavar="NAME",
        help="with --existing-kubeconfig: a StorageClass (reclaimPolicy Retain) for each run's "
        "ledger volume; on kind, `up` makes one on kind's local-path provisioner",
    )
    up.add_argument(
        "--ledger-volumes",
        default=None,
        metavar="NODE_DIR[=HOST_DIR]",
        help="with --ledger-storage-class: where the nodes keep that class's volumes, and where "
        "this machine sees that directory (default: the same path); each run's directory is then "
        "copied home to the artifact root",
    )
    up.add_argument(
        "--name",
        default="society",
        help="kind: the cluster's name (default: %(default)s)",
    )
    up.add_argument(
        "--provider",
        choices=["docker", "podman"],
        default=None,
        help="kind: the nodes' container engine (default: docker when on PATH, else podman)",
    )
    up.add_argument(
        "--node-image",
        default=None,
        metavar="REF",
        help="kind: create the nodes from this image (`kind create --image`; default: "
        "kind/cluster.yaml's); scripts/build-kind-node-image.sh builds one with no registry",
    )
    up.add_argument(
        "--host-patches",
        type=Path,
        default=None,
        metavar="DIR",
        help="kind: a host's patches, as in kind/host/: cluster-patches.yaml is merged into a "
        "copy of kind/cluster.yaml (never into the file), containers.conf is podman's "
        "CONTAINERS_CONF (see kind/README.md, 'Host patches')",
    )
    up.add_argument(
        "--addons-from-source",
        action="store_true",
        help="kind: run the registry, Kueue and Agent Sandbox built here from the Go module "
        "proxy (scripts/build-kind-addon-images.sh) instead of the published images and "
        "release manifests, for a machine that reaches no image registry",
    )
    up.add_argument(
        "--warm-pool",
        type=int,
        default=0,
        metavar="N",
        help="keep N sandboxes of the scripted runtime's shape warm (Agent Sandbox's "
        "SandboxWarmPool in the namespace society-warm): a roster whose scripted agents fit "
        "claims them instead of making a pod each (docs/kubernetes.md, 'Warm pools'; "
        "default: %(default)s, no pool)",
    )
    up.set_defaults(handler=_up)
    down = actions.add_parser(
        "down",
        help="remove what `cluster up` made: the chart, Temporal, namespaces, imported images, "
        "the kind cluster and registry (when it made them), and the profile file",
        description="Reads the profile file `cluster up` wrote and removes what it made; a "
        "cluster given with --existing-kubeconfig is kept, with everything up installed in it "
        "removed.",
    )
    _common(down)
    down.set_defaults(handler=_down)
    push = actions.add_parser(
        "push-images",
        help="build the images, push them to a registry, and write their Helm values (GKE)",
        description="Builds the images (scripts/build-images.sh), pushes each to REGISTRY with "
        "the container engine (podman, else docker; log in first, e.g. `gcloud auth "
        "configure-docker REGION-docker.pkg.dev`), and writes a Helm values file naming the "
        "worker's image and the image map by the digests the registry reported. On GKE: "
        '--registry "$(tofu -chdir=terraform output -raw registry)", then pass the file to '
        "`helm install -f`.",
    )
    push.add_argument("--registry", required=True, metavar="HOST[/PATH]")
    push.add_argument("--values-out", type=Path, required=True, metavar="FILE")
    push.add_argument(
        "--warm-pool",
        type=int,
        default=0,
        metavar="N",
        help="also write a warm pool of N sandboxes of the scripted runtime's shape into the "
        "values (warmPools; the chart makes it in society-warm; default: %(default)s, none)",
    )
    push.set_defaults(handler=_push_images)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=["kind"], default="kind", help="only kind for now")
    parser.add_argument(
        "--artifacts",
        type=Path,
        default=None,
        metavar="DIR",
        help="artifact root that holds the profile file (default: $SOCIETY_ARTIFACTS, else "
        "./artifacts)",
    )


def _error(action: str, message: str) -> None:
    print(f"society cluster {action}: error: {message}", file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    import anyio

    from controller.cli.run_commands import artifact_root
    from controller.ops.cluster.install import ClusterOptions, ClusterUp
    from controller.ops.cluster.prerequisites import PrerequisitesMissing, find_programs
    from controller.ops.cluster.queue_size import parse_selector
    from controller.ops.cluster.steps import StepFailed
    from controller.ops.repository import CheckoutMissing, checkout

    try:
        checkout()
    except CheckoutMissing as exc:
        _error("up", str(exc))
        return EXIT_SETUP
    if args.node_containerd and args.existing_kubeconfig is None:
        _error("up", "--node-containerd needs --existing-kubeconfig (kind nodes pull from the "
                     "local registry)")  # fmt: skip
        return EXIT_SETUP
    if args.existing_kubeconfig is not None and not args.existing_kubeconfig.is_file():
        _error("up", f"--existing-kubeconfig {args.existing_kubeconfig} is not a file")
        return EXIT_SETUP
    if (args.ledger_storage_class or args.ledger_volumes) and args.existing_kubeconfig is None:
        _error("up", "--ledger-storage-class and --ledger-volumes need --existing-kubeconfig "
                     "(on kind, `up` makes the class and the mount itself)")  # fmt: skip
        return EXIT_SETUP
    kind_only = [flag for flag, given in (
        ("--node-image", args.node_image), ("--host-patches", args.host_patches),
        ("--addons-from-source", args.addons_from_source), ("--provider", args.provider),
        ("--name", args.name != "society"),
    ) if given]  # fmt: skip
    if kind_only and args.existing_kubeconfig is not None:
        _error("up", f"{', '.join(kind_only)} set up a kind cluster; leave them out with "
                     "--existing-kubeconfig")  # fmt: skip
        return EXIT_SETUP
    if args.host_patches is not None and not args.host_patches.is_dir():
        _error("up", f"--host-patches {args.host_patches} is not a directory (kind/host/ is one)")
        return EXIT_SETUP
    if args.ledger_volumes and not args.ledger_storage_class:
        _error("up", "--ledger-volumes needs --ledger-storage-class")
        return EXIT_SETUP
    node_dir, _, host_dir = (args.ledger_volumes or "").partition("=")
    try:
        agent_nodes = parse_selector(args.agent_nodes)
    except ValueError as exc:
        _error("up", f"--agent-nodes: {exc}")
        return EXIT_SETUP
    try:
        programs = find_programs(
            existing_cluster=args.existing_kubeconfig is not None,
            import_images=bool(args.node_containerd),
            provider=args.provider,
        )
    except PrerequisitesMissing as exc:
        _error("up", str(exc))
        return EXIT_SETUP
    options = ClusterOptions(
        artifact_root=artifact_root(args),
        profile=args.profile,
        existing_kubeconfig=args.existing_kubeconfig,
        context=args.context,
        agent_nodes=agent_nodes,
        node_containerd=list(args.node_containerd),
        ledger_storage_class=args.ledger_storage_class,
        ledger_node_root=node_dir or None,
        ledger_host_root=(host_dir or node_dir) or None,
        cluster_name=args.name,
        node_image=args.node_image,
        host_patches=args.host_patches,
        addons_from_source=args.addons_from_source,
        warm_pool=args.warm_pool,
    )
    try:
        path = anyio.run(ClusterUp(options, programs, sys.stderr).run)
    except StepFailed as exc:
        _error("up", f"{exc}\n  the steps before it are done; fix this and run it again")
        return EXIT_FAILED
    print(
        f"ready: `society run MODULE.py --profile {args.profile} --artifacts "
        f"{options.artifact_root}` reads {path}",
        file=sys.stderr,
    )
    print(path)
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    import anyio

    from controller.cli.run_commands import artifact_root
    from controller.ops.cluster.install import ClusterDown, ClusterOptions
    from controller.ops.cluster.prerequisites import PrerequisitesMissing, find_programs
    from controller.ops.cluster.steps import StepFailed
    from controller.platforms.kubernetes.profile_file import ProfileFileError, read_profile

    root = artifact_root(args)
    try:
        profile = read_profile(root, args.profile)
    except ProfileFileError as exc:
        _error("down", str(exc))
        return EXIT_SETUP
    if profile is None:
        print(
            f"society cluster down: nothing to remove: no profile file under {root} (`kind "
            "delete cluster --name society` removes a cluster made another way)",
            file=sys.stderr,
        )
        return EXIT_OK
    try:
        programs = find_programs(
            existing_cluster=profile.existing_cluster,
            import_images=bool(profile.imported),
            provider=profile.provider,
        )
    except PrerequisitesMissing as exc:
        _error("down", str(exc))
        return EXIT_SETUP
    options = ClusterOptions(artifact_root=root, profile=args.profile)
    if profile.existing_cluster:
        options.existing_kubeconfig = Path(profile.kubeconfig)
    options.context = profile.context
    try:
        anyio.run(ClusterDown(options, programs, profile, sys.stderr).run)
    except StepFailed as exc:
        _error("down", f"{exc}\n  fix this and run it again")
        return EXIT_FAILED
    return EXIT_OK


def _push_images(args: argparse.Namespace) -> int:
    import json
    import shutil

    from controller.ops.cluster import images
    from controller.ops.cluster.steps import StepFailed

    engine = shutil.which("podman") or shutil.which("docker")
    if engine is None:
        _error("push-images", "neither podman nor docker is on PATH: install one (Debian: "
                              "apt-get install podman) and retry")  # fmt: skip
        return EXIT_SETUP
    try:
        built = images.build_images()
        pushed, _ = images.push_to_registry(Path(engine), args.registry.rstrip("/"), built)
        values = images.chart_image_values(pushed, warm_pool=args.warm_pool)
    except StepFailed as exc:
        _error("push-images", str(exc))
        return EXIT_FAILED
    args.values_out.write_text(json.dumps(values, indent=2) + "\n")  # JSON is YAML
    print(f"pushed {len(pushed)} images to {args.registry}; values in {args.values_out}",
          file=sys.stderr)  # fmt: skip
    print(args.values_out)
    return EXIT_OK
