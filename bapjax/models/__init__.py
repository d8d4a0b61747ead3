"""Flax models for Builder Action Prediction: world CNN, text encoders, action decoders, builder."""

from bapjax.models.builder import BuilderModel, build_model

__all__ = ["BuilderModel", "build_model"]
