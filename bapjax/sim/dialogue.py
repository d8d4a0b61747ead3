"""The six-step dialogue loop shared by the three simulators (paper section 5.1.2).

Each iteration (a ``Segment``): 1. the Architect plans (the simulator picks target cells and a
reference block); 2. a Builder pose is sampled (``spatial.sample_pose``) and fixes the frame of
every direction in the segment; 3. the Architect's instruction is written (``language``);
4. with a small probability a detail is left out and the Builder asks for it; 5. the Builder acts
(``bapjax.sim.planner.plan_actions``, temporary supports included); 6. the Builder may confirm.

``GameState`` holds what both players see (the built structure, the last block the Builder
placed) and turns the simulators' decisions into segments; ``SimGame`` is a finished game, which
``bapjax.sim.writer`` writes as an MDC game log.  Every segment keeps a ``record``: the grounded
meaning of its instruction (kind, color, world target cells, reference block, relation offsets
and Builder-anchored directions in the Builder's frame, pose, clarification), so tests can check
the language against the world.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from bapjax.sim import language, phrasebook, spatial
from bapjax.sim.planner import plan_actions
from bapjax.world import grid
from bapjax.world.grid import PLACE, Action
from bapjax.world.items import BuilderPose

CLARIFICATION_P = 0.08  # an omitted detail (color, count, direction, length)
LOCATION_QUESTION_P = 0.06  # the Builder checks the frame ("my left or yours?") and gets a true answer
CONFIRMATION_P = 0.3  # "done" after the Builder's actions
CHECK_P = 0.15  # "like this?" after the Builder's actions (the Architect answers)
FEEDBACK_P = 0.45  # the Architect says "good" / "perfect" after the Builder's actions
ACK_P = 0.15  # the Builder says "ok" / "got it" before acting
TRANSITION_P = 0.2  # "ok next" / "this next one is a bit tricky" before an instruction
AFTER_CHAT_P = 0.07  # "sorry, that took a while" / "no worries" after the actions
SUPPORT_REMARK_P = 0.25  # "i used a temp block and removed it", when the plan had supports
REPEAT_P = 0.02  # the Builder asks the Architect to say it again
CORRECTION_P = 0.04  # a single block placed in the wrong color, the Architect's correction, the fix
OVERVIEW_P = 0.4  # the Architect describes the whole structure first (block count, colors, height)
FRAME_NOTE_P = 0.2  # "all directions are from your point of view" at the start
GREETING_P = 0.45
CLOSING_P = 0.45
SPLIT_P = 0.35  # the instruction comes as two chat lines (cut at a comma outside grounded phrases)
STAY_P = 0.6  # the Builder keeps looking from the same side as in the previous segment


@dataclasses.dataclass
class Segment:
    pose: BuilderPose
    lines: list[tuple[str, str]]  # (speaker, text): lead-in, instruction, clarification, acknowledgement
    actions: list[Action]
    after: list[tuple[str, str]]  # (speaker, text) after the actions: "done", "like this?", "perfect"
    record: dict


@dataclasses.dataclass
class SimGame:
    dataset: str
    segments: list[Segment]
    target: dict  # {(x, y, z): color}: the structure at the end of the game
    opening: list[tuple[str, str]]  # greeting turns before the first instruction
    closing: list[tuple[str, str]]  # turns after the last segment
    start_pose: BuilderPose
    info: dict  # per-game facts for statistics (shape kinds, ...)

    def truncated(self, num_segments: int) -> "SimGame":
        """The game cut after ``num_segments`` instructions; the target becomes what was built."""
        segments = self.segments[:num_segments]
        if segments and segments[-1].record.get("mistake"):  # cut before its correction: no mistake then
            segments[-1] = _without_mistake(segments[-1])
        built = grid.apply_sequence({}, [action for segment in segments for action in segment.actions])
        overview = set(map(tuple, self.info.get("overview", [])))  # true of the whole target only
        opening = [turn for turn in self.opening if tuple(turn) not in overview]
        return dataclasses.replace(self, segments=segments, target=built, opening=opening, closing=[],
                                   info={**self.info, "truncated": True, "overview": []})


def _without_mistake(segment: Segment) -> Segment:
    """The segment with its wrongly colored block placed in the right color instead."""
    mistake = segment.record["mistake"]
    cell, wrong = tuple(mistake["cell"]), grid.color_id(mistake["color"])
    right = grid.color_id(segment.record["color"])
    actions = [Action(PLACE, right, *cell) if (a.type == PLACE and a.cell == cell and a.color == wrong) else a
               for a in segment.actions]
    record = {key: value for key, value in segment.record.items() if key != "mistake"}
    return dataclasses.replace(segment, actions=actions, record=record)


class GameState:
    """The world during a simulated game, and the segments written so far."""

    def __init__(self, rng: np.random.Generator, dataset: str):
        self.rng = rng
        self.dataset = dataset
        self.structure: dict = {}
        self.last_cell: tuple | None = None
        self.segments: list[Segment] = []

    # Step 2 -------------------------------------------------------------------------------
    def sample_pose(self, focus_cells: Sequence, extra_cells: Sequence = ()) -> BuilderPose:
        """A pose that sees the focus cells, outside everything built and about to be built."""
        quadrant = None
        if self.segments and language.chance(self.rng, STAY_P):
            quadrant = spatial.yaw_quadrant(self.segments[-1].pose.yaw)
        return spatial.sample_pose(self.rng, list(self.structure) + list(extra_cells), focus_cells, quadrant)

    # Step 5 -------------------------------------------------------------------------------
    def execute(self, goal: dict, order: Sequence | None = None) -> list[Action]:
        """The Builder turns the world into ``goal`` (planner, supports included)."""
        actions = plan_actions(self.structure, goal, rng=self.rng, order=list(order) if order else None)
        walk = grid.StructureWalk(self.structure)
        last = None
        for action in actions:  # a re-check of the grid rules (the tests re-check too)
            if not walk.step(action):
                raise RuntimeError(f"planner produced an infeasible action {action}: {walk.reason(action)}")
        current = walk.structure
        if current != goal:
            raise RuntimeError("planner did not reach its goal")
        for action in actions:
            if action.type == PLACE and goal.get(action.cell) == action.color:
                last = action.cell
        self.structure = current
        if last is not None:
            self.last_cell = last
        return actions

    # Steps 3, 4, 6 ------------------------------------------------------------------------
    def add_segment(self, pose: BuilderPose, instruction: str, record: dict, goal: dict,
                    order: Sequence | None = None, clarification: tuple[str, str] | None = None,
                    lead: Sequence[str] = (), notes: Sequence[str] = (), mistake_cell=None) -> Segment:
        """Execute ``goal`` and write the chat around it: optional lead-in lines (``lead``, or an
        Architect transition), the instruction (maybe split in two lines), the clarification
        turns (an omitted detail, else maybe a frame check with a true answer), maybe the
        Builder's "ok"; after the actions maybe "done" / "like this?" and the Architect's "good".
        ``mistake_cell``: the one block the instruction places; with CORRECTION_P the Builder
        places it in a wrong color (``record["mistake"]``), and a correction segment follows (the
        MDC's undo-and-redo items: the next item's reference removes it and places it right)."""
        rng = self.rng
        prev = dict(self.structure)
        right = wrong = None
        if mistake_cell is not None and language.chance(rng, CORRECTION_P):
            mistake_cell = tuple(mistake_cell)
            right = goal[mistake_cell]
            held = [sum(1 for v in prev.values() if v == c) for c in range(grid.NUM_COLORS + 1)]
            wrong = language.pick(rng, [c for c in range(1, grid.NUM_COLORS + 1)
                                        if c != right and held[c] < grid.INVENTORY_PER_COLOR])
            goal = {**goal, mistake_cell: wrong}
            record = {**record, "mistake": {"cell": list(mistake_cell), "color": language.color_word(wrong)}}
        actions = self.execute(goal, order)
        placed = sorted(c for c in goal if prev.get(c) != goal[c])
        removed = sorted(c for c in prev if c not in goal)
        instruction_lines = split_instruction(rng, instruction, record)
        lines = [("Architect", line) for line in lead]
        if not lead and self.segments and language.chance(rng, TRANSITION_P):
            lines.append(("Architect", language.talk(rng, phrasebook.ARCHITECT_TRANSITIONS)))
        lines += [("Architect", line) for line in instruction_lines]
        lines += [("Architect", line) for line in notes]
        if clarification is None and language.chance(rng, LOCATION_QUESTION_P):
            clarification = location_question(rng, record, prev)
        if clarification is None and language.chance(rng, REPEAT_P):  # "come again?" -> the instruction again
            clarification = (language.talk(rng, phrasebook.REPEAT_QUESTIONS, question=True),
                             language.pick(rng, phrasebook.REPEAT_PREFIXES) + " ".join(instruction.split()))
        if clarification is not None:
            lines += [("Builder", clarification[0]), ("Architect", clarification[1])]
        elif language.chance(rng, ACK_P):
            lines.append(("Builder", language.talk(rng, phrasebook.BUILDER_ACKS)))
        after = []
        if language.chance(rng, CONFIRMATION_P):
            after.append(("Builder", language.confirmation(rng)))
        if wrong is not None:  # no praise for a mistake
            pass
        elif language.chance(rng, CHECK_P):
            after.append(("Builder", language.talk(rng, phrasebook.CHECK_QUESTIONS, question=True)))
            after.append(("Architect", language.talk(rng, phrasebook.CHECK_ANSWERS)))
        elif language.chance(rng, FEEDBACK_P):
            after.append(("Architect", language.talk(rng, phrasebook.ARCHITECT_FEEDBACK)))
        if len(actions) > len(placed) + len(removed) and language.chance(rng, SUPPORT_REMARK_P):
            after.append(("Builder", language.talk(rng, phrasebook.SUPPORT_REMARKS)))  # temporary supports were used
        if language.chance(rng, AFTER_CHAT_P):
            after.append(("Builder", language.talk(rng, phrasebook.BUILDER_AFTER_CHAT)))
            after.append(("Architect", language.talk(rng, phrasebook.ARCHITECT_AFTER_CHAT)))
        record = {
            **record,
            "segment": len(self.segments),
            "text": instruction,
            "lines": instruction_lines,
            "clarification": list(clarification) if clarification else None,
            "pose": list(pose),
            "yaw_quadrant": spatial.yaw_quadrant(pose.yaw),
            "placed_cells": [list(c) for c in placed],
            "removed_cells": [list(c) for c in removed],
            "num_actions": len(actions),
        }
        segment = Segment(pose, lines, actions, after, record)
        self.segments.append(segment)
        if wrong is not None:
            self._correct(pose, mistake_cell, right, wrong)
        return segment

    def _correct(self, pose: BuilderPose, cell: tuple, right: int, wrong: int) -> None:
        """The Architect's correction of a wrongly colored block and the Builder's fix."""
        rng = self.rng
        right_text, wrong_text = language.color_word(right), language.color_word(wrong)
        text = language.correction(rng, right_text, wrong_text)
        lines = [("Architect", text)]
        if language.chance(rng, 0.5):
            lines.append(("Builder", language.talk(rng, phrasebook.MISTAKE_REPLIES)))
        actions = self.execute({**self.structure, cell: right})
        after = [("Architect", language.talk(rng, phrasebook.ARCHITECT_FEEDBACK))] if language.chance(rng, FEEDBACK_P) else []
        record = {"kind": "correction", "color": right_text, "wrong_color": wrong_text, "target_cells": [list(cell)],
                  "ref": None, "relation": None, "anchor": None, "omitted": None, "segment": len(self.segments),
                  "text": text, "lines": [text], "clarification": None, "pose": list(pose),
                  "yaw_quadrant": spatial.yaw_quadrant(pose.yaw), "placed_cells": [list(cell)],
                  "removed_cells": [], "num_actions": len(actions)}
        self.segments.append(Segment(pose, lines, actions, after, record))

    def say_after(self, text: str) -> None:
        """The Architect's line after the last segment's actions (replaces a generic one)."""
        segment = self.segments[-1]
        segment.after = [turn for turn in segment.after if turn[0] != "Architect"] + [("Architect", text)]

    def maybe_omit(self, allowed: Sequence[str]) -> str | None:
        """Which detail (if any) the Architect leaves out of this instruction."""
        if allowed and language.chance(self.rng, CLARIFICATION_P):
            return language.pick(self.rng, list(allowed))
        return None

    def finish(self, info: dict, start_pose: BuilderPose | None = None) -> SimGame:
        rng = self.rng
        opening = []
        if language.chance(rng, GREETING_P):
            greeting = language.talk(rng, phrasebook.OPENERS)
            opening.append(("Architect", greeting))
            if greeting.endswith("?") or language.chance(rng, 0.6):
                opening.append(("Builder", language.talk(rng, phrasebook.OPENER_REPLIES)))
        if language.chance(rng, FRAME_NOTE_P):
            opening.append(("Architect", language.frame_note(rng)))
            if language.chance(rng, 0.5):
                opening.append(("Builder", language.talk(rng, phrasebook.FRAME_NOTE_REPLIES)))
        if language.chance(rng, OVERVIEW_P):
            kinds = list(info.get("shapes") or [])
            overview = [("Architect", line) for line in language.overview_lines(rng, self.structure, len(kinds) or None, kinds)]
            opening += overview
            info = {**info, "overview": [list(turn) for turn in overview]}
        closing = []
        if language.chance(rng, CLOSING_P):
            closing.append(("Architect", language.talk(rng, phrasebook.CLOSINGS)))
            if language.chance(rng, 0.5):
                closing.append(("Builder", language.talk(rng, phrasebook.CLOSING_REPLIES)))
        if start_pose is None:
            start_pose = self.segments[0].pose if self.segments else BuilderPose(0.0, 1.0, -5.0, 0.0, 20.0)
        return SimGame(self.dataset, self.segments, dict(self.structure), opening, closing, start_pose, info)


def location_question(rng: np.random.Generator, record: dict, prev: dict) -> tuple[str, str] | None:
    """A Builder question about the frame and the Architect's true answer, or None when none
    fits: left/right words are the Builder's own ("my left or yours?" -> "your left"), every
    direction is from where the Builder stands now, and a first block may go anywhere on the
    ground."""
    said = " ".join(filter(None, [(record.get("relation") or {}).get("text"),
                                  (record.get("anchor") or {}).get("text")])).lower()
    ref_text = (record.get("ref") or {}).get("text")
    kinds = []
    if record.get("kind") == "first" and not prev:
        kinds.append("ground")
    if " left" in f" {said}" or " right" in f" {said}":
        kinds.append("side")
    if said:
        kinds.append("view")
    if ref_text and ref_text not in ("it", "that one"):
        kinds += ["ref", "ref"]
    if not kinds:
        return None
    kind = language.pick(rng, kinds)
    if kind == "ref":  # "which one?" -> the reference expression again
        question = language.talk(rng, phrasebook.REFERENCE_QUESTIONS, question=True)
        return question, language.pick(rng, phrasebook.REFERENCE_ANSWERS).format(ref=ref_text)
    question = language.talk(rng, phrasebook.LOCATION_QUESTIONS[kind], question=True)
    if kind == "side":  # answer about the side the question names
        side = "left" if "left" in question.lower() else "right"
        answer = language.pick(rng, phrasebook.LOCATION_ANSWERS["side"]).replace("left", side)
    else:
        answer = language.pick(rng, phrasebook.LOCATION_ANSWERS[kind])
    return question, answer


def split_instruction(rng: np.random.Generator, instruction: str, record: dict) -> list[str]:
    """With probability SPLIT_P the Architect sends the instruction as two chat lines, cut at a
    comma outside every grounded phrase (relation, reference, anchor), as MDC Architects often
    do ("now a red block" / "two to the left of the blue one")."""
    if not language.chance(rng, SPLIT_P):
        return [instruction]
    lower = instruction.lower()
    spans = []
    for key in ("relation", "ref", "anchor"):
        phrase = (record.get(key) or {}).get("text")
        if phrase:
            start = lower.find(phrase.lower())
            if start >= 0:
                spans.append((start, start + len(phrase)))
    cuts = [i for i in range(len(instruction) - 2) if instruction[i:i + 2] == ", "
            and not any(a <= i < b for a, b in spans) and 0 < i]
    if not cuts:
        return [instruction]
    chosen = sorted(rng.choice(cuts, size=min(len(cuts), int(rng.integers(1, 3))), replace=False).tolist())
    parts, start = [], 0
    for cut in chosen:
        parts.append(instruction[start:cut].strip())
        start = cut + 2
    parts.append(instruction[start:].strip())
    if not all(parts):
        return [instruction]
    return parts
