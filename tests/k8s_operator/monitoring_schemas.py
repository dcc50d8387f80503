"""JSON Schemas of the two prometheus-operator kinds the chart renders (monitoring.coreos.com/v1),
written for these tests from the generated CRDs of prometheus-operator v0.82-v0.84
(example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml and
monitoring.coreos.com_servicemonitors.yaml): field names, types, patterns, required fields.

Objects are closed (unknown fields fail, as kubectl's strict field validation does). The
PrometheusRule schema is the CRD's whole spec; the ServiceMonitor schema covers the fields the
chart uses (selectors and endpoints with port, path and interval). The CRD's rule that a rule
sets exactly one of `alert` and `record` is a `oneOf` here.
"""

from typing import Any

Schema = dict[str, Any]
DURATION: Schema = {
    "type": "string",
    "pattern": (
        r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
        r"(([0-9]+)ms)?)$"
    ),
}
STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA: Schema = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string", "minLength": 1},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}


def closed(properties: Schema, required: tuple[str, ...] = ()) -> Schema:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": list(required),
    }


def resource(kind: str, spec: Schema) -> Schema:
    return closed(
        {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": METADATA,
            "spec": spec,
        },
        ("apiVersion", "kind", "metadata", "spec"),
    )


RULE: Schema = {
    **closed(
        {
            "alert": {"type": "string", "minLength": 1},
            "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
            "expr": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
            "for": DURATION,
            "keep_firing_for": {**DURATION, "minLength": 1},
            "labels": STRING_MAP,
            "annotations": STRING_MAP,
        },
        ("expr",),
    ),
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}
RULE_GROUP: Schema = closed(
    {
        "name": {"type": "string", "minLength": 1},
        "interval": DURATION,
        "query_offset": DURATION,
        "labels": STRING_MAP,
        "limit": {"type": "integer"},
        "partial_response_strategy": {"type": "string", "pattern": r"^(?i:abort|warn)?$"},
        "rules": {"type": "array", "items": RULE},
    },
    ("name",),
)
LABEL_SELECTOR: Schema = closed(
    {
        "matchLabels": STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": closed(
                {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
                ("key", "operator"),
            ),
        },
    }
)
ENDPOINT: Schema = closed(
    {
        "port": {"type": "string"},
        "targetPort": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
    }
)
SCHEMAS: dict[str, Schema] = {
    "PrometheusRule": resource(
        "PrometheusRule",
        closed({"groups": {"type": "array", "items": RULE_GROUP}}),
    ),
    "ServiceMonitor": resource(
        "ServiceMonitor",
        closed(
            {
                "namespaceSelector": closed(
                    {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    }
                ),
                "selector": LABEL_SELECTOR,
                "endpoints": {"type": "array", "items": ENDPOINT},
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
            },
            ("selector",),
        ),
    ),
}
