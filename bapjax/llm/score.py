"""Scoring LLM responses: read `{"item_id", "response"}` lines, parse, and run the v2 evaluator.

The metrics are `bapjax.evaluate`'s (`evaluate_items`); this module only turns text into the
feasible action sequences the evaluator takes (`bapjax.llm.parse`) and adds the per-file
``"parse"`` counts to its report. An item with no response is scored as an empty prediction and
counted; a response naming an unknown item, or an item twice, is a `UserError` naming the line.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.llm.parse import ParseCounts, parse_response
from bapjax.world import jsonl
from bapjax.world.grid import Action
from bapjax.world.items import BapItem


class ResponsesError(UserError):
    """A responses file that cannot be matched to the items; the message names the line."""


def read_responses(path: str | os.PathLike, items: Sequence[BapItem]) -> dict[str, str | None]:
    """{item_id: response text} (None for a null response) from a responses JSONL file."""
    known = {item.item_id for item in items}
    out: dict[str, str | None] = {}
    for where, record in jsonl.iter_records(path, "responses", ResponsesError):
        if not isinstance(record, dict) or "item_id" not in record:
            raise ResponsesError(f"{where}: expected an object with item_id and response")
        item_id = record["item_id"]
        if not isinstance(item_id, str) or item_id not in known:
            raise ResponsesError(f"{where}: item {item_id!r} is not among the {len(items)} items being scored")
        if item_id in out:
            raise ResponsesError(f"{where}: item {item_id} has a second response")
        if "response" not in record:
            raise ResponsesError(f"{where}: item {item_id}: missing field 'response'")
        response = record["response"]
        if response is not None and not isinstance(response, str):
            raise ResponsesError(f"{where}: item {item_id}: field 'response' is a {type(response).__name__}; "
                                 "expected a string")
        out[item_id] = response
    return out


def parse_responses(items: Sequence[BapItem], responses: Mapping[str, str | None]
                    ) -> tuple[dict[str, list[Action]], ParseCounts]:
    """Every item's feasible actions (empty without a response) and the file's counts."""
    counts = ParseCounts(responses=len(responses))
    predictions = {}
    for item in items:
        if item.item_id not in responses:
            counts.items_without_response += 1
            predictions[item.item_id] = []
            continue
        predictions[item.item_id] = parse_response(responses[item.item_id], item.prev_structure, counts)
    return predictions, counts


def score_responses(items: Sequence[BapItem], responses: Mapping[str, str | None]
                    ) -> tuple[dict, dict[str, list[Action]]]:
    """(the evaluator's report with a "parse" object added, the parsed predictions)."""
    predictions, counts = parse_responses(items, responses)
    report = evaluator.evaluate_predictions(items, predictions)
    report["parse"] = counts.as_dict()
    return report, predictions
