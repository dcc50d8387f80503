"""JSON Schemas of the two Gateway API kinds the operator renders, written for these tests from the
upstream API references (field names, types, enums, patterns, limits, required fields):

- InferencePool, inference.networking.k8s.io/v1: Gateway API Inference Extension v1.6.0
  (api/v1/inferencepool_types.go and shared_types.go; the generated CRD
  config/crd/bases/inference.networking.k8s.io_inferencepools.yaml).
- HTTPRoute, gateway.networking.k8s.io/v1: Gateway API v1.6.1, standard channel
  (config/crd/standard/gateway.networking.k8s.io_httproutes.yaml).

Objects are closed (unknown fields fail, as kubectl's strict field validation does). The
HTTPRoute schema covers the fields a route to an InferencePool uses (parentRefs, hostnames,
rules with path matches, URLRewrite filters, backendRefs, timeouts); the CEL rules (e.g. a
Service endpointPickerRef needs a port) are checked by the tests as plain assertions.
"""

from typing import Any

Schema = dict[str, Any]
DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
GROUP: Schema = {"type": "string", "maxLength": 253, "pattern": rf"^$|^{DNS_SUBDOMAIN}$"}
KIND: Schema = {
    "type": "string",
    "minLength": 1,
    "maxLength": 63,
    "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
}
OBJECT_NAME: Schema = {"type": "string", "minLength": 1, "maxLength": 253}
NAMESPACE: Schema = {
    "type": "string",
    "minLength": 1,
    "maxLength": 63,
    "pattern": rf"^{DNS_LABEL}$",
}
PORT_NUMBER: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
SECTION_NAME: Schema = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": rf"^{DNS_SUBDOMAIN}$",
}
DURATION: Schema = {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}
LABEL_KEY: Schema = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": (
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
    ),
}
LABEL_VALUE: Schema = {
    "type": "string",
    "maxLength": 63,
    "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
}


def closed(properties: Schema, required: tuple[str, ...] = ()) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


METADATA: Schema = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": OBJECT_NAME, "namespace": NAMESPACE},
}
PORT: Schema = closed({"number": PORT_NUMBER}, ("number",))

INFERENCE_POOL_SPEC: Schema = closed(
    {
        "selector": closed(
            {
                "matchLabels": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 64,
                    "propertyNames": LABEL_KEY,
                    "additionalProperties": LABEL_VALUE,
                }
            },
            ("matchLabels",),
        ),
        "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "items": PORT},
        "appProtocol": {"type": "string", "enum": ["http", "kubernetes.io/h2c"]},
        "endpointPickerRef": closed(
            {
                "group": GROUP,
                "kind": KIND,
                "name": OBJECT_NAME,
                "port": PORT,
                "failureMode": {"type": "string", "enum": ["FailOpen", "FailClose"]},
            },
            ("name",),
        ),
    },
    ("selector", "targetPorts"),
)
INFERENCE_POOL_V1: Schema = closed(
    {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "metadata": METADATA,
        "spec": INFERENCE_POOL_SPEC,
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

PARENT_REF: Schema = closed(
    {
        "group": GROUP,
        "kind": KIND,
        "namespace": NAMESPACE,
        "name": OBJECT_NAME,
        "sectionName": SECTION_NAME,
        "port": PORT_NUMBER,
    },
    ("name",),
)
BACKEND_REF: Schema = closed(
    {
        "group": GROUP,
        "kind": KIND,
        "name": OBJECT_NAME,
        "namespace": NAMESPACE,
        "port": PORT_NUMBER,
        "weight": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
    },
    ("name",),
)
PATH_MATCH: Schema = closed(
    {
        "type": {"type": "string", "enum": ["Exact", "PathPrefix", "RegularExpression"]},
        "value": {"type": "string", "maxLength": 1024},
    }
)
URL_REWRITE_FILTER: Schema = closed(
    {
        "type": {"const": "URLRewrite"},
        "urlRewrite": closed(
            {
                "hostname": {"type": "string", "minLength": 1, "maxLength": 253},
                "path": closed(
                    {
                        "type": {
                            "type": "string",
                            "enum": ["ReplaceFullPath", "ReplacePrefixMatch"],
                        },
                        "replaceFullPath": {"type": "string", "maxLength": 1024},
                        "replacePrefixMatch": {"type": "string", "maxLength": 1024},
                    },
                    ("type",),
                ),
            }
        ),
    },
    ("type",),
)
HTTP_ROUTE_RULE: Schema = closed(
    {
        "name": SECTION_NAME,
        "matches": {"type": "array", "maxItems": 64, "items": closed({"path": PATH_MATCH})},
        "filters": {"type": "array", "maxItems": 16, "items": URL_REWRITE_FILTER},
        "backendRefs": {"type": "array", "maxItems": 16, "items": BACKEND_REF},
        "timeouts": closed({"request": DURATION, "backendRequest": DURATION}),
    }
)
HTTP_ROUTE_V1: Schema = closed(
    {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "metadata": METADATA,
        "spec": closed(
            {
                "parentRefs": {"type": "array", "maxItems": 32, "items": PARENT_REF},
                "hostnames": {
                    "type": "array",
                    "maxItems": 16,
                    "items": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 253,
                        "pattern": rf"^(\*\.)?{DNS_SUBDOMAIN}$",
                    },
                },
                "rules": {"type": "array", "maxItems": 16, "items": HTTP_ROUTE_RULE},
            }
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)
SCHEMAS = {
    "inference.networking.k8s.io/v1": INFERENCE_POOL_V1,
    "gateway.networking.k8s.io/v1": HTTP_ROUTE_V1,
}
