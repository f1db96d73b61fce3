"""JSON Schemas that kubeconform validates the profiles' objects against, generated from the
pinned kube-apiserver's OpenAPI v2 document and the pinned Kueue and Agent Sandbox CRDs.

One standalone file per kind and version, laid out as kubeconform's schema-location template
``{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json`` finds it (the core group is
named ``v1`` there). Each file carries the definitions it references, and every object that lists
its properties forbids others (strict), so a misspelt field fails instead of being pruned.
Only the kinds the chart and the platform code create are generated (``VALIDATED_KINDS``): a
new kind fails the check until the schemas are regenerated (``scripts/generate-kube-schemas.py``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from controller.errors import OpsError
from controller.ops.repository import ROOT as REPO

SCHEMA_DIR = REPO / "schemas" / "kubernetes"
LOCATION_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"

VALIDATED_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "ConfigMap"),
    ("v1", "Namespace"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("batch/v1", "Job"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "Workload"),
    ("agents.x-k8s.io/v1beta1", "Sandbox"),
)
"""(apiVersion, kind) of every object the checks validate."""

Schemas = dict[str, Any]
"""Relative path under ``SCHEMA_DIR`` -> schema."""

_REF_PREFIX = "#/definitions/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def schema_path(api_version: str, kind: str) -> str:
    """Where kubeconform's ``LOCATION_TEMPLATE`` looks for ``kind`` at ``api_version``."""
    group, _, version = api_version.rpartition("/")
    return f"{group or version}/{kind.lower()}_{version}.json"


def core_schemas(openapi_v2: Mapping[str, Any], kinds: Iterable[tuple[str, str]]) -> Schemas:
    """The built-in ``kinds`` from the apiserver's ``/openapi/v2`` document."""
    definitions: Mapping[str, Any] = openapi_v2["definitions"]
    by_gvk: dict[tuple[str, str], str] = {}
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            by_gvk[(api_version, gvk["kind"])] = name
    schemas: Schemas = {}
    for api_version, kind in kinds:
        found = by_gvk.get((api_version, kind))
        if found is None:
            continue  # not a built-in kind (a CRD's)
        needed = _referenced(definitions, found)
        root = _strict(_fixed(definitions[found]), api_version, kind)
        root["definitions"] = {n: _strict(_fixed(definitions[n])) for n in sorted(needed)}
        root["$schema"] = "http://json-schema.org/draft-07/schema#"
        schemas[schema_path(api_version, kind)] = root
    return schemas


def crd_schemas(crds: Iterable[Mapping[str, Any]], kinds: Iterable[tuple[str, str]]) -> Schemas:
    """The ``kinds`` defined by CustomResourceDefinitions, from each served version's schema."""
    wanted = set(kinds)
    schemas: Schemas = {}
    for crd in crds:
        spec = crd["spec"]
        kind = spec["names"]["kind"]
        for version in spec["versions"]:
            api_version = f"{spec['group']}/{version['name']}"
            if (api_version, kind) not in wanted or not version.get("served"):
                continue
            root = _strict(_fixed(version["schema"]["openAPIV3Schema"]), api_version, kind)
            root["$schema"] = "http://json-schema.org/draft-07/schema#"
            schemas[schema_path(api_version, kind)] = root
    return schemas


def write(schemas: Schemas, directory: Path = SCHEMA_DIR) -> None:
    """Replace ``directory``'s schemas with ``schemas`` (stable formatting, so diffs are real)."""
    for old in directory.glob("*/*.json"):
        old.unlink()
    for relative, schema in schemas.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(schema))


def render(schema: Any) -> str:
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def committed(directory: Path = SCHEMA_DIR) -> dict[str, str]:
    """The committed schema files' text, by relative path."""
    return {
        str(path.relative_to(directory)): path.read_text()
        for path in sorted(directory.glob("*/*.json"))
    }


def _referenced(definitions: Mapping[str, Any], root: str) -> set[str]:
    """Every definition reachable from ``root`` through ``$ref`` (``root`` excluded)."""
    seen: set[str] = set()
    pending = [definitions[root]]
    while pending:
        for ref in _refs(pending.pop()):
            if ref not in seen:
                seen.add(ref)
                pending.append(definitions[ref])
    seen.discard(root)
    return seen


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            yield ref[len(_REF_PREFIX) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _fixed(node: Any) -> Any:
    """Translate OpenAPI idioms into JSON Schema that accepts what the apiserver accepts:
    int-or-string and quantities take numbers too, ``nullable`` takes null, and a ``$ref``
    stands alone (draft 7 ignores its siblings)."""
    if isinstance(node, list):
        return [_fixed(value) for value in node]
    if not isinstance(node, dict):
        return node
    node = {key: _fixed(value) for key, value in node.items()}
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        for key in ("type", "format", "anyOf"):
            node.pop(key, None)
        node["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if node.get("$ref") == _REF_PREFIX + _QUANTITY:
        node = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    if node.pop("nullable", False) and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    if "$ref" in node and len(node) > 1:
        node = {"$ref": node["$ref"]}
    return node


def _strict(node: Any, api_version: str | None = None, kind: str | None = None) -> Any:
    """``node`` with ``additionalProperties: false`` wherever properties are listed and unknown
    fields are not preserved; a root also pins its apiVersion and kind."""
    node = copy.deepcopy(node)
    _forbid_unknown(node)
    if api_version is not None and kind is not None:
        properties = node.setdefault("properties", {})
        properties["apiVersion"] = {"type": "string", "enum": [api_version]}
        properties["kind"] = {"type": "string", "enum": [kind]}
    return node


def _forbid_unknown(node: Any) -> None:
    if isinstance(node, list):
        for value in node:
            _forbid_unknown(value)
        return
    if not isinstance(node, dict):
        return
    if (
        isinstance(node.get("properties"), dict)
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        node["additionalProperties"] = False
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            for child in value.values():
                _forbid_unknown(child)
        elif key != "enum":
            _forbid_unknown(value)


class SchemaSourceIncomplete(OpsError):
    """The OpenAPI document and CRDs given lack a kind the checks validate."""

    reason = "schema-source-incomplete"


def generate(openapi_v2: Mapping[str, Any], crd_files: Iterable[Path]) -> Schemas:
    """Every ``VALIDATED_KINDS`` schema from the apiserver's OpenAPI v2 and the CRD files."""
    import yaml  # type: ignore[import-untyped]

    crds = [doc for path in crd_files for doc in yaml.safe_load_all(path.read_text()) if doc]
    schemas = core_schemas(openapi_v2, VALIDATED_KINDS) | crd_schemas(crds, VALIDATED_KINDS)
    missing = [
        f"{api_version} {kind}"
        for api_version, kind in VALIDATED_KINDS
        if schema_path(api_version, kind) not in schemas
    ]
    if missing:
        raise SchemaSourceIncomplete(
            f"no schema for {', '.join(missing)} in the apiserver's OpenAPI or the CRDs given; "
            "check the pinned versions in kind/versions.env"
        )
    return schemas


def crd_files(manifest_dir: Path) -> list[Path]:
    """The pinned Kueue and Agent Sandbox CRDs under the control plane's ``manifests/``."""
    return sorted(manifest_dir.glob("*/crds/*.yaml"))


def fetch_openapi_v2(api_client: Any) -> dict[str, Any]:
    """The apiserver's ``/openapi/v2`` document through a ``kubernetes.client.ApiClient``."""
    method, url, headers, body, _ = api_client.param_serialize(
        "GET", "/openapi/v2", header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api_client.call_api(method, url, header_params=headers, body=body)
    response.read()
    document: dict[str, Any] = json.loads(response.data)
    return document
