"""Desired-vs-live comparison and the merge patch that removes fields we no longer set."""

from llm_operator.k8s.diff import is_subset, merge_patch, parse_quantity, with_last_applied


def test_server_defaults_do_not_count_as_drift() -> None:
    desired = {"spec": {"containers": [{"name": "engine", "image": "x"}]}}
    live = {"spec": {"containers": [{"name": "engine", "image": "x", "imagePullPolicy": "Always"}]}}
    assert is_subset(desired, live)


def test_a_changed_or_missing_field_is_drift() -> None:
    assert not is_subset({"spec": {"replicas": 2}}, {"spec": {"replicas": 1}})
    assert not is_subset({"spec": {"args": ["a", "b"]}}, {"spec": {"args": ["a"]}})


def test_canonicalised_quantities_are_equal() -> None:
    assert is_subset({"cpu": 1, "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})
    assert is_subset({"cpu": "500m"}, {"cpu": "0.5"})
    assert parse_quantity("2Gi") == 2 * 1024**3
    assert not is_subset({"enabled": True}, {"enabled": 1})


def test_fields_dropped_from_the_desired_state_are_nulled() -> None:
    before = with_last_applied({"metadata": {"name": "x"}, "spec": {"a": 1, "b": {"c": 2}}})
    after = {"metadata": {"name": "x"}, "spec": {"a": 1, "b": {}}}
    patch = merge_patch(after, before)
    assert patch["spec"]["b"] == {"c": None}
