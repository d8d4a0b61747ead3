"""BAP as text for LLMs: prompts and completions, fine-tuning sets, retrieval few-shot, scoring.

An LLM builder (Nebula, GPT-4 with code-style actions, Llama-CRAFTS) reads an item as text and
answers with actions as text. This package is the one serializer and the one tolerant parser for
three layouts (`bapjax.llm.formats`: ``nebula``, ``code``, ``rich``), so responses produced on
any machine are scored here by the v2 evaluator (`bapjax.evaluate`), with the same net-action
rules as every other model:

    python -m bapjax.llm export --format code --corpus @mdc --split test --out test.jsonl --shots 3
    python -m bapjax.llm score --format code --corpus @mdc --split test --responses answers.jsonl
    python -m bapjax.llm finetune-set --config=configs/cl.py --format rich --out train.jsonl

Modules: `formats` (render), `parse` (tolerant parsing, per-file counts), `score` (responses
through the evaluator), `retrieval` (MiniLM few-shot with cached sentence vectors), `lengths`
(prompt-length report), `__main__` (CLI). See docs/llm.md.
"""
