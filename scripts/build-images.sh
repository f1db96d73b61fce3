#!/usr/bin/env bash
# Build every container image from the repository's Dockerfiles with no container registry,
# save each as an OCI archive and write the image map (image name -> name@sha256:digest).
#
#   base        a Debian bookworm minbase root filesystem with python3 (mmdebstrap), imported
#               with podman; each Dockerfile's BASE build argument is set to it
#   wheels      the Python dependencies as wheels, built on the host (pip wheel; PyPI or pip's
#               cache), so that the image builds need no network
#   pause       kind/pause: the test node's pod sandbox, one static binary FROM scratch
#   python, controller, worker, openclaw, nanoclaw, temporal   agent_images/*/Dockerfile; the python image
#               serves the scripted, llm and peer runtimes (each descriptor carries its command),
#               so the map names it three times: society/{scripted,llm,peer}:dev
#   openclaw    also takes Node 24 and OpenClaw from the host's install of
#               scripts/install-openclaw.sh (run here, idempotent; npm's registry and cache),
#               hard-linked into the context, so npm never runs in a build
#   nanoclaw    likewise takes Node 24 and the Claude Agent SDK from the host's install of
#               scripts/install-nanoclaw.sh (proprietary: the image is for this machine's node,
#               never to be published)
#
# Idempotent: podman's layer cache and the files under
#   ${SOCIETY_IMAGE_DIR:-$HOME/.cache/society-runner/images}/
# make a second run take seconds; podman keeps its own storage there (not the host's).
# Output: archives/<name>.tar (OCI archives) and images.json, whose path is printed last:
#   {"images": {"society/scripted:dev": "localhost/society/python@sha256:...", ...},
#    "archives": {"localhost/society/python@sha256:...": "/.../archives/python.tar", ...}}
# Prints one line per component with its time; the tools' output goes to build.log there.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${SOCIETY_IMAGE_DIR:-${HOME}/.cache/society-runner/images}"
PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"
SUITE=bookworm
REGISTRY=localhost/society
IMAGES=(python controller worker openclaw nanoclaw temporal)
PYTHON_RUNTIMES=(scripted llm peer)  # the runtimes the python image serves

die() {
    echo "build-images: ERROR: $*" >&2
    exit 1
}
log() { echo "build-images: $*" >&2; }

for tool in podman mmdebstrap gcc; do
    command -v "${tool}" >/dev/null 2>&1 || die "'${tool}' is missing; run scripts/install-node.sh"
done
[[ -x "${PYTHON}" ]] || die "${PYTHON} is missing; run scripts/bootstrap.sh"

mkdir -p "${OUT_DIR}/archives"
BUILD_LOG="${OUT_DIR}/build.log"
exec 9>"${OUT_DIR}/.lock"
flock 9

# podman with its own storage under OUT_DIR, Debian's runc and no systemd.
pm() {
    podman --root "${OUT_DIR}/storage" --runroot "${OUT_DIR}/run" --storage-driver overlay \
        --runtime /usr/sbin/runc --cgroup-manager cgroupfs --events-backend file "$@"
}

CURRENT_STEP=""
trap 'tail -n 30 "${BUILD_LOG}" >&2 2>/dev/null; die "${CURRENT_STEP:-building the images} failed (the lines above are the end of ${BUILD_LOG})"' ERR
set -E
step() {
    CURRENT_STEP="$1"
    shift
    local t0=${SECONDS}
    echo "=== ${CURRENT_STEP} ($(date -u +%FT%TZ))" >>"${BUILD_LOG}"
    "$@" >>"${BUILD_LOG}" 2>&1
    log "$(printf '%-28s %4ds' "${CURRENT_STEP}" $((SECONDS - t0)))"
    CURRENT_STEP=""
}
START=${SECONDS}

# --- base: Debian minbase + python3, made here -------------------------------------------
BASE_PACKAGES="python3,python-is-python3,ca-certificates"
BASE_KEY="$(echo "${SUITE} ${BASE_PACKAGES} 1" | sha256sum | cut -c1-12)"
BASE_IMAGE="${REGISTRY}/base:${BASE_KEY}"
make_base() {
    local tar="${OUT_DIR}/base-${BASE_KEY}.tar"
    if [[ ! -f "${tar}" ]]; then
        mmdebstrap --variant=minbase --format=tar --include="${BASE_PACKAGES}" \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            "${SUITE}" "${tar}.tmp"
        mv "${tar}.tmp" "${tar}"
    fi
    pm import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "${tar}" "${BASE_IMAGE}"
}
if pm image exists "${BASE_IMAGE}"; then
    log "$(printf '%-28s cached' "base (${SUITE})")"
else
    step "base (${SUITE})" make_base
fi

# --- wheels: the dependencies of pyproject.toml, plus pip to install them -----------------
WHEEL_EXTRAS="gke"  # the images export ledgers to GCS (google-cloud-storage)
WHEEL_KEY="$({ "${PYTHON}" -c 'import sys; print(sys.version_info[:2])'; echo "${WHEEL_EXTRAS}"; } |
    cat - "${REPO_ROOT}/pyproject.toml" | sha256sum | cut -c1-12)"
WHEELS="${OUT_DIR}/wheels-${WHEEL_KEY}"
make_wheels() {
    rm -rf "${WHEELS}.tmp" && mkdir -p "${WHEELS}.tmp"
    "${PYTHON}" -m pip wheel --quiet --wheel-dir "${WHEELS}.tmp" "${REPO_ROOT}[${WHEEL_EXTRAS}]"
    "${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: --dest "${WHEELS}.tmp" pip
    rm -f "${WHEELS}.tmp"/society_runner-*.whl  # the source goes in as files
    mv "${WHEELS}.tmp" "${WHEELS}"
}
if [[ -d "${WHEELS}" ]]; then
    log "$(printf '%-28s cached' "wheels")"
else
    step "wheels" make_wheels
fi

# --- the build context: the sources the Dockerfiles copy, and the wheels -------------------
CONTEXT="${OUT_DIR}/context"
stage_context() {
    rm -rf "${CONTEXT}" && mkdir -p "${CONTEXT}"
    (cd "${REPO_ROOT}" && git ls-files -z --cached --others --exclude-standard -- \
        pyproject.toml README.md society_sandbox ledger controller agent_images kind/pause |
        xargs -0 -I{} cp --parents {} "${CONTEXT}/")
    cp -al "${WHEELS}" "${CONTEXT}/wheels"
    gcc -static -Os -s -o "${CONTEXT}/kind/pause/pause" "${REPO_ROOT}/kind/pause/pause.c"
}
stage_context

# --- openclaw: the pinned Node and OpenClaw install, hard-linked (no copy of its ~840 MB) --------
stage_openclaw() {
    env -u SOCIETY_OPENCLAW_DIR "${REPO_ROOT}/scripts/install-openclaw.sh"
    local dir
    dir="$(cd "${REPO_ROOT}" && env -u SOCIETY_OPENCLAW_DIR PYTHONPATH="${REPO_ROOT}" "${PYTHON}" -c \
        'from society_sandbox.runtimes.openclaw import install_dir; print(install_dir())')"
    # hard links when the install is on this filesystem, else a copy
    cp -al "${dir}" "${CONTEXT}/openclaw" 2>/dev/null ||
        { rm -rf "${CONTEXT}/openclaw" && cp -a "${dir}" "${CONTEXT}/openclaw"; }
}
step "openclaw install (staged)" stage_openclaw

# --- nanoclaw: the pinned Node and Claude Agent SDK install, hard-linked (~650 MB) ----------
stage_nanoclaw() {
    env -u SOCIETY_NANOCLAW_DIR "${REPO_ROOT}/scripts/install-nanoclaw.sh"
    local dir
    dir="$(cd "${REPO_ROOT}" && env -u SOCIETY_NANOCLAW_DIR PYTHONPATH="${REPO_ROOT}" "${PYTHON}" -c \
        'from society_sandbox.runtimes.nanoclaw import install_dir; print(install_dir())')"
    cp -al "${dir}" "${CONTEXT}/nanoclaw" 2>/dev/null ||
        { rm -rf "${CONTEXT}/nanoclaw" && cp -a "${dir}" "${CONTEXT}/nanoclaw"; }
}
step "nanoclaw install (staged)" stage_nanoclaw

# --- images: build, then save as OCI archives (only when the image changed) ----------------
declare -A DOCKERFILES=([pause]=kind/pause/Dockerfile)
for name in "${IMAGES[@]}"; do DOCKERFILES[${name}]="agent_images/${name}/Dockerfile"; done
MAP_IMAGES=""
MAP_ARCHIVES=""
for name in pause "${IMAGES[@]}"; do
    tag="${REGISTRY}/${name}:build"
    dir="${CONTEXT}"
    [[ "${name}" == pause ]] && dir="${CONTEXT}/kind/pause"
    t0=${SECONDS}
    pm build --quiet --network=none --layers --build-arg "BASE=${BASE_IMAGE}" \
        -f "${CONTEXT}/${DOCKERFILES[${name}]}" -t "${tag}" "${dir}" >>"${BUILD_LOG}" 2>&1 ||
        die "building ${name} failed; see ${BUILD_LOG}"
    id="$(pm image inspect --format '{{.Id}}' "${tag}")"
    archive="${OUT_DIR}/archives/${name}.tar"
    what="built"
    if [[ "$(cat "${archive}.id" 2>/dev/null)" != "${id}" ]]; then
        rm -f "${archive}"
        # openclaw's layers stay uncompressed: gzip of its ~900 MB took longer than the build
        save=(--format oci-archive)
        [[ "${name}" == openclaw || "${name}" == nanoclaw ]] && save+=(--uncompressed)
        pm save --quiet "${save[@]}" -o "${archive}.tmp" "${tag}" >>"${BUILD_LOG}" 2>&1
        mv "${archive}.tmp" "${archive}"
        echo "${id}" >"${archive}.id"
        what="built and saved"
    fi
    digest="$(tar -xOf "${archive}" index.json | "${PYTHON}" -c \
        'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')"
    size="$(pm image inspect --format '{{.Size}}' "${tag}")"
    log "$(printf '%-28s %4ds  %s, %d MB' "${name}" $((SECONDS - t0)) "${what}" $((size / 1000000)))"
    ref="${REGISTRY}/${name}@${digest}"
    names=("${name}")
    [[ "${name}" == python ]] && names=("${PYTHON_RUNTIMES[@]}")
    for runtime in "${names[@]}"; do MAP_IMAGES+="\"society/${runtime}:dev\": \"${ref}\", "; done
    MAP_ARCHIVES+="\"${ref}\": \"${archive}\", "
done

# --- the image map ------------------------------------------------------------------------
MAP="${OUT_DIR}/images.json"
"${PYTHON}" - "${MAP}" "{${MAP_IMAGES%, }}" "{${MAP_ARCHIVES%, }}" <<'EOF'
import json, pathlib, sys
path, images, archives = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
text = json.dumps({"images": images, "archives": archives}, indent=2, sort_keys=True)
pathlib.Path(path + ".tmp").write_text(text + "\n")
pathlib.Path(path + ".tmp").rename(path)
EOF
log "images ready in $((SECONDS - START))s"
echo "${MAP}"
