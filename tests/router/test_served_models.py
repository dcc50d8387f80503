"""ServedModels: a replica's GET /v1/models, and the fleet's list the router answers with."""

from __future__ import annotations

from typing import Any

from router.replicas.served_models import merged_model_list, parse_model_list


def model_list(*cards: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": list(cards)}


BASE = {"id": "llama", "object": "model", "root": "/m", "parent": None, "max_model_len": 4096}


def adapter(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "root": f"/adapters/{name}", "parent": "llama"}


def test_entries_with_a_parent_are_adapters_and_the_rest_base_models() -> None:
    served = parse_model_list(model_list(BASE, adapter("sql"), {"id": "plain"}))
    assert served is not None
    assert served.adapters() == ["sql"]
    assert served.serves("llama") and served.serves("plain") and served.serves("sql")
    assert not served.is_adapter("llama") and served.is_adapter("sql")


def test_an_answer_that_is_no_model_list_is_none_and_bad_entries_are_skipped() -> None:
    assert parse_model_list({"error": {"message": "x"}}) is None
    assert parse_model_list([BASE]) is None
    served = parse_model_list(model_list(BASE, {"id": 7}, "junk"))
    assert served is not None and list(served.cards) == ["llama"]


def test_the_fleets_list_is_the_base_then_the_union_of_adapters_once_each() -> None:
    one = parse_model_list(model_list(BASE, adapter("sql"), adapter("chat")))
    two = parse_model_list(model_list(BASE, adapter("sql"), adapter("poems")))
    assert one is not None and two is not None
    merged = merged_model_list([one, two])
    assert merged["object"] == "list"
    assert [c["id"] for c in merged["data"]] == ["llama", "chat", "poems", "sql"]
    assert merged["data"][0] == BASE  # a replica's card as it listed it
    assert {c["parent"] for c in merged["data"][1:]} == {"llama"}


def test_without_drops_one_model() -> None:
    served = parse_model_list(model_list(BASE, adapter("sql")))
    assert served is not None
    assert list(served.without("sql").cards) == ["llama"]
    assert served.serves("sql")  # the original is unchanged
