"""Simulators for BAP v2's synthetic data: target structures, the Builder planner, dialogues."""
