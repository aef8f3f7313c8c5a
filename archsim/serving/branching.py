"""Reasoning programs as trees of requests: best-of-N sampling, beam search and tree search.

A program is one session whose rows fork from their parent's KV: a row's prompt is its parent's prompt plus the
parent's answer (plus any tokens of its own), so its full blocks carry the parent's keys and the engine finds
them cached -- one copy however many children hold them -- and each child recomputes only the parent's last,
partial block (the copy a fork makes) before decoding its own answer. A row arrives when its parent's answer is
complete. Shapes (`Branching.kind`):

* samples N (best-of-N, self-consistency): the prompt's prefill row (1 token), then N answers of `output` tokens
  minus that one, each continuing the prompt;
* beam W: the prefill row, then levels of `segment_tokens` until `output` tokens: each of the W beams of a level
  continues a beam of the level before drawn uniformly (the survivors of a beam step; beams never drawn are
  pruned and their blocks freed) -- a neutral model of the genealogy of the top-W selection (an assumption);
* tree: a node is a reasoning step of `output` tokens. From the root (the prompt's first step) the search expands
  the current node into `width` children, evaluates each (a row of `eval_tokens` prompt tokens after the child,
  one output token: the verifier's prefill over the child, by default the same model; `verifier` names another,
  whose KV of the path is its own, shared by the evaluations only) and moves to a child drawn
  uniformly, or with probability `backtrack` to an unexpanded sibling of the current node, whose KV is older,
  until it is `depth` steps deep. `parents` gives the tree instead: node i continues node parents[i] (-1: the
  prompt; parents listed first), every node but the root evaluated. An expansion waits for the evaluation of
  the node it expands (which waits for that node's answer), as the selection needs that node's score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("samples", "beam", "tree")


@dataclass(frozen=True)
class Branching:
    kind: str  # samples | beam | tree
    samples: int = 0  # samples: answers per prompt
    width: int = 0  # beam: beams; tree: children per expansion
    segment_tokens: int = 0  # beam: tokens per beam step
    depth: int = 0  # tree: steps from the root to the deepest node
    backtrack: float = 0.0  # tree: probability of moving to an unexpanded sibling instead of a child
    eval_tokens: int = 0  # tree: the verifier's prompt tokens after a node (0: no evaluation)
    parents: tuple[int, ...] | None = None  # tree: the tree itself, instead of depth / width / backtrack
    verifier: str | None = None  # tree: the evaluations' model, a preset (None: the scenario's own model)


@dataclass
class Program:
    """One session's rows: the row whose answer a row continues (-1: none), the row it waits for (usually the
    same), its own prompt tokens and its answer tokens."""

    parent: list[int]
    after: list[int]
    user: list[int]
    output: list[int]
    evaluation: list[bool]  # the row is a tree node's evaluation (the verifier's pass)

    def add(self, parent: int, user: int, output: int, after: int | None = None, evaluation: bool = False) -> int:
        self.parent.append(parent)
        self.after.append(parent if after is None else after)
        self.user.append(user)
        self.output.append(output)
        self.evaluation.append(evaluation)
        return len(self.parent) - 1


def program(b: Branching, prompt_tokens: int, output_tokens: int, rng: np.random.Generator) -> Program:
    """The rows of one program with a `prompt_tokens` prompt and `output_tokens` per answer (tree: per step)."""
    p = Program([], [], [], [], [])
    if b.kind == "samples":
        root = p.add(-1, prompt_tokens, 1)
        for _ in range(b.samples):
            p.add(root, 0, max(1, output_tokens - 1))
    elif b.kind == "beam":
        level = [p.add(-1, prompt_tokens, 1)]
        left = max(1, output_tokens - 1)
        while left > 0:
            step = min(b.segment_tokens, left)
            parents = [level[int(i)] for i in rng.integers(len(level), size=b.width)]
            level = [p.add(parent, 0, step) for parent in parents]
            left -= step
    elif b.parents is not None:
        _explicit_tree(p, b, prompt_tokens, output_tokens)
    else:
        _searched_tree(p, b, prompt_tokens, output_tokens, rng)
    return p


def _explicit_tree(p: Program, b: Branching, prompt_tokens: int, step_tokens: int) -> None:
    assert b.parents is not None
    rows: list[int] = []
    for parent in b.parents:
        if parent < 0:
            rows.append(p.add(-1, prompt_tokens, step_tokens))
            continue
        rows.append(p.add(rows[parent], 0, step_tokens))
        if b.eval_tokens:
            p.add(rows[-1], b.eval_tokens, 1, evaluation=True)


def _searched_tree(p: Program, b: Branching, prompt_tokens: int, step_tokens: int, rng: np.random.Generator) -> None:
    """Expand, evaluate, select or backtrack until the current node is `depth` steps deep."""
    current = p.add(-1, prompt_tokens, step_tokens)
    depth = {current: 0}
    parent_of: dict[int, int] = {}
    expanded: dict[int, list[int]] = {}
    scored: dict[int, int] = {current: current}  # what an expansion of a node waits for: its evaluation
    while depth[current] < b.depth:
        kids = []
        for _ in range(b.width):
            kid = p.add(current, 0, step_tokens, after=scored[current])
            depth[kid], parent_of[kid] = depth[current] + 1, current
            kids.append(kid)
            scored[kid] = p.add(kid, b.eval_tokens, 1, evaluation=True) if b.eval_tokens else kid
        expanded[current] = kids
        up = parent_of.get(current)
        siblings = [n for n in expanded.get(up, []) if n not in expanded] if up is not None else []
        if siblings and rng.random() < b.backtrack:
            current = siblings[int(rng.integers(len(siblings)))]
        else:
            current = kids[int(rng.integers(len(kids)))]
