"""Text side of the inputs: tokenizer, vocabulary, GloVe vectors."""

from bapjax.text.glove import load_glove_50d
from bapjax.text.tokenizer import tokenize
from bapjax.text.vocab import Vocabulary

__all__ = ["Vocabulary", "load_glove_50d", "tokenize"]
