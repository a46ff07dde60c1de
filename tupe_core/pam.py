"""Positional-attention (PAM) blocks of the Locality & Symmetry paper's code (Chen et al. 2023).

No position enters at the input; instead every layer has a *positional attention*: a matrix that
depends only on positions and is used directly as attention weights (no softmax). Three systems
(``docs/positional_encodings.md``, section "PAM", explains each and where it departs from the code):

* ``concat``: learned weights ``w[h, |j - i|]`` per layer and head, Gaussian-initialised as
  ``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)``, applied to their own value projection;
  the result is concatenated with a PE-free self-attention and merged by ``Linear(2d -> d)``;
* ``sequential``: the same positional attention, whose output is the input of the self-attention;
* ``window``: fixed weights 1/3 on keys ``i-1, i, i+1`` (first/last rows sum to 2/3), applied to
  the layer input itself (no projection), concatenated with self-attention and merged.

Shapes: ``T`` tokens, ``B`` batch, ``C = d`` model width, ``H`` heads, ``dh = d / H``.
Padding: a padded key gets weight 0, implemented by zeroing its value row (the same product
without a (B, H, T, T) tensor). Rows of real tokens therefore equal those of the sequence alone.
Cost over a plain attention block, inherent to the math: ``concat`` adds a d x d projection, the
(2d -> d) merge and one (T, T) product per head; ``sequential`` the projection and the product;
``window`` the merge (its band is two shifted adds). Everything else here is elementwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from .attend import Dropout
from .attention import SelfAttention
from .base import AS_IS, ATTENTION_BLOCK, BLOCK, PositionalEncoding, PositionalTerm, PositionMap, check_length
from .learned_gaussian import gaussian_by_distance
from .options import option

PAM_MODES = ("concat", "sequential", "window")


def gaussian_distance_init(num_heads: int, max_positions: int) -> Tensor:
    """(H, max_positions): ``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` for every head."""
    return gaussian_by_distance(max_positions).repeat(num_heads, 1)


def distance_weights(table: Tensor, seq_len: int) -> Tensor:
    """(H, T, T) positional attention ``table[h, |j - i|]`` of a learned (H, max_positions) table."""
    idx = torch.arange(seq_len, device=table.device)
    dist = (idx[None, :] - idx[:, None]).abs().view(-1)
    # index_select, not table[:, dist]: its backward is an index_add (several times faster on CPU
    # than advanced indexing's accumulating index_put, ~20 ms per layer at T = 512)
    return table.index_select(-1, dist).view(*table.shape[:-1], seq_len, seq_len)


def window_weights(seq_len: int, window: int = 3, dtype=torch.float32, device=None) -> Tensor:
    """(T, T) fixed uniform window: ``1/window`` where ``|j - i| <= window // 2``, else 0.

    The official ``cal_fixed_pos_att`` gives the same band for T >= window (rows 0 and T-1 keep
    two entries, sum 2/3); for T < window it returns the identity, we keep the band (a sequence
    of T tokens must not change when it is padded to a longer batch).
    """
    idx = torch.arange(seq_len, device=device)
    band = (idx[None, :] - idx[:, None]).abs() <= window // 2
    return band.to(dtype) / window


class PamSelfAttention(SelfAttention):
    """A PE-free content self-attention (the inherited q/k/v/out_proj) combined with a positional
    attention as ``mode`` says. ``forward`` has ``SelfAttention``'s signature; ``mask`` is
    only the padding part (PAM variants have no positional bias), ``key_padding_mask`` the same as
    (B, T) booleans, which the positional branch uses.

    Relative to the official blocks (``concat.py``, ``seuqence.py``, ``bert.py``), which merge the
    two branches *before* the output projection (``proj(merge([p, h]))``), the merge here acts on
    the content output *after* ``out_proj`` (``merge([p, out_proj(h)])``): the same family of
    functions with the same parameter count, and the content branch stays a plain
    ``SelfAttention`` (its maps are read by the analysis commands as for every variant).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        mode: str,
        max_positions: int,
        dropout: float = 0.0,
        scale_factor: float = 1.0,
        attention_path: str = "sdpa",
    ):
        super().__init__(embed_dim, num_heads, dropout, scale_factor, attention_path)
        if mode not in PAM_MODES:
            raise ValueError(f"PAM mode must be one of {PAM_MODES}, got {mode!r}")
        self.mode, self.max_positions = mode, max_positions
        if mode == "window":  # bert.py: dropout on the averaged input, no projection
            self.pos_dropout = Dropout(dropout)
        else:  # concat.py / seuqence.py: learned weights on their own value projection, no dropout
            self.pos_weight = nn.Parameter(gaussian_distance_init(num_heads, max_positions))  # (H, P)
            self.pos_v_proj = nn.Linear(embed_dim, embed_dim)
        if mode != "sequential":
            self.merge = nn.Linear(2 * embed_dim, embed_dim)

    def initial_values(self) -> Dict[str, Tensor]:
        """The Gaussian start of the learned position weights (the exported model's init sets it)."""
        return {} if self.mode == "window" else {"pos_weight": gaussian_distance_init(self.num_heads, self.max_positions)}

    def position_weights(self, seq_len: int) -> Tensor:
        """The learned content-free attention weights (H, T, T) of ``concat``/``sequential``. ``window``'s fixed
        band, ``window_weights``, is applied as two shifted adds (``positional_attention``)."""
        check_length(seq_len, self.max_positions)
        return distance_weights(self.pos_weight, seq_len)

    def positional_attention(self, x: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """(T, B, C) -> (T, B, C): position weights applied to values, padded keys weighted 0."""
        T, B, C = x.shape
        if self.mode == "window":  # the band of window_weights as two shifted adds: O(T C), not O(T^2 C)
            v = x if key_padding_mask is None else x.masked_fill(key_padding_mask.t().unsqueeze(-1), 0.0)
            out = v.clone()
            out[1:] += v[:-1]  # key i - 1
            out[:-1] += v[1:]  # key i + 1
            return self.pos_dropout(out / 3)
        H, dh = self.num_heads, self.head_dim
        v = self.pos_v_proj(x).view(T, B, H, dh)
        if key_padding_mask is not None:  # weight 0 on a padded key == its value row 0
            v = v.masked_fill(key_padding_mask.t()[:, :, None, None], 0.0)
        # The weights are shared by the batch: fold B into the columns, one (T, T) @ (T, B dh) per
        # head, instead of a (B, H, T, dh) matmul that copies the weights (and their gradient) B times
        v = v.permute(2, 0, 1, 3).reshape(H, T, B * dh)
        out = torch.bmm(self.position_weights(T).to(v.dtype), v)  # (H, T, B dh)
        return out.view(H, T, B, dh).permute(1, 2, 0, 3).reshape(T, B, C)

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor],
        positions: PositionalTerm,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (T, B, C); key_padding_mask: (B, T) True at padding, or None. Returns (T, B, C) and,
        with ``need_weights``, the content attention's (B, H, T, T) probabilities (the positional
        weights are ``position_weights(T)``, or ``window_weights(T)``)."""
        p = self.positional_attention(x, key_padding_mask)  # (T, B, C)
        if self.mode == "sequential":
            return super().forward(p, mask, positions, key_padding_mask, need_weights)
        h, weights = super().forward(x, mask, positions, key_padding_mask, need_weights)
        return self.merge(torch.cat([h, p], dim=-1)), weights


@dataclass(frozen=True)
class PamOptions:
    mode: str = option("concat", "the PAM system (set by --attention-block pam_<mode>)", PAM_MODES, flag=False)


class Pam(PositionalEncoding):
    """``--attention-block pam_concat / pam_sequential / pam_window``: nothing at ``positions``; every layer's
    block holds its own position weights (learned) or applies the fixed band (window)."""

    enters = BLOCK
    left_padding = AS_IS  # w[h, |j - i|], or the band i-1..i+1 (a padded key weighs 0): a shifted row keeps its meaning

    name = "pam"
    Options = PamOptions
    flags = (ATTENTION_BLOCK,)

    # --attention-block pam_<mode> selects it with that mode
    @classmethod
    def selects(cls, flags: Mapping[str, Any]) -> bool:
        return flags["attention_block"] in cls.selected_values("attention_block")

    @classmethod
    def options_from_flags(cls, flags: Mapping[str, Any]) -> PamOptions:
        return PamOptions(mode=flags["attention_block"][len("pam_"):])  # "pam_concat" -> "concat"

    @classmethod
    def to_flags(cls, options: PamOptions) -> Dict[str, Any]:
        return {"attention_block": f"pam_{options.mode}"}

    @classmethod
    def selected_values(cls, flag: str) -> Tuple[Any, ...]:
        return tuple(f"pam_{mode}" for mode in PAM_MODES) if flag == "attention_block" else ()

    @classmethod
    def switches(cls, defaults: Mapping[str, Any]) -> Tuple[str, ...]:
        return ("attention_block",)

    @classmethod
    def attention_block(cls, options, embed_dim, num_heads, dropout, attention_path, max_positions):
        return PamSelfAttention(embed_dim, num_heads, mode=options.mode, max_positions=max_positions, dropout=dropout,
                                scale_factor=cls.scale_for(options), attention_path=attention_path)

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.mode = options.mode

    @classmethod
    def untrained_beyond(cls, options, trained: int) -> Optional[str]:
        if options.mode == "window":
            return None
        return "learned position-only weights per distance |j-i|: the distances of T and more were never trained"

    def trained_positions(self, encoder_state) -> Optional[int]:
        table = encoder_state.get("layers.0.self_attn.pos_weight")  # (H, max_positions) per layer; none: the window
        return None if table is None else table.size(-1)

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        """The exact weights the layers apply to their values (no softmax): (L, H, T, T) learned, one table per
        layer, or (1, T, T) for the window (rows are not normalised)."""
        check_length(seq_len, self.max_positions)
        if self.mode == "window":
            return PositionMap(window_weights(seq_len, dtype=torch.float64)[None], weights=True)
        tables = [encoder_state[f"layers.{i}.self_attn.pos_weight"] for i in range(self.num_layers)]
        return PositionMap(torch.stack([distance_weights(t.double(), seq_len) for t in tables]), weights=True,
                           per_layer=True)
