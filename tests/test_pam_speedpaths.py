"""The fast paths of the PAM positional branch (tupe_plugin/modules/pam.py) against plain references
written here: the learned weights as one (T, T) product per head with the batch folded into the
columns and the table read by index_select, the window as two shifted adds. Forward *and* gradients
(the fast paths change the backward too), with padding, B > 1 and H > 1 so a layout slip shows."""
import pytest
import torch

from tupe_core.pam import PamSelfAttention, distance_weights

D, H, P = 12, 3, 16  # width, heads (dh = 4), max positions
T, LENGTHS = 9, [9, 6, 2]


def reference_positional(m: PamSelfAttention, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """(T, B, C): ``sum_j A[i, j] v_j`` over real keys j, with ``A_h[i, j] = w_h[|j - i|]`` (learned,
    ``v = pos_v_proj(x)`` per head) or ``1/3`` on ``|j - i| <= 1`` (window, ``v = x``); the weights are
    built entry by entry and applied as a dense product, each batch element and head on its own."""
    Tx, B, C = x.shape
    dh = C // m.num_heads
    v = x if m.mode == "window" else x @ m.pos_v_proj.weight.t() + m.pos_v_proj.bias
    rows = []
    for b in range(B):
        keep = (~pad[b]).to(x.dtype)[:, None]  # (T, 1): padded keys weigh 0
        heads = []
        for h in range(m.num_heads):
            if m.mode == "window":
                a = torch.tensor([[1 / 3 if abs(i - j) <= 1 else 0.0 for j in range(Tx)] for i in range(Tx)],
                                 dtype=x.dtype)
            else:
                a = torch.stack([torch.stack([m.pos_weight[h, abs(i - j)] for j in range(Tx)]) for i in range(Tx)])
            s = slice(h * dh, (h + 1) * dh)
            heads.append(a.to(x.dtype) @ (v[:, b, s] * keep))  # (T, dh)
        rows.append(torch.cat(heads, dim=-1))
    return torch.stack(rows, dim=1)  # (T, B, C)


def block(mode: str) -> PamSelfAttention:
    torch.manual_seed(0)
    m = PamSelfAttention(D, H, mode=mode, max_positions=P).double().eval()  # eval: window dropout off
    if mode != "window":
        with torch.no_grad():
            m.pos_weight.add_(0.1 * torch.randn(H, P, dtype=torch.float64))
    return m


@pytest.mark.parametrize("mode", ["concat", "window"])  # sequential runs the same branch as concat
def test_positional_branch_and_its_gradients_match_dense_reference(mode):
    m = block(mode)
    pad = torch.arange(T)[None, :] >= torch.tensor(LENGTHS)[:, None]  # (B, T)
    x = torch.randn(T, len(LENGTHS), D, dtype=torch.float64, requires_grad=True)
    g = torch.randn(T, len(LENGTHS), D, dtype=torch.float64)  # a generic output gradient
    names = ["x"] + [n for n, _ in m.named_parameters() if n.startswith("pos_")]
    params = [x] + [p for n, p in m.named_parameters() if n.startswith("pos_")]

    fast = m.positional_attention(x, pad)
    fast_grads = torch.autograd.grad((fast * g).sum(), params)
    want = reference_positional(m, x, pad)
    want_grads = torch.autograd.grad((want * g).sum(), params)

    assert torch.allclose(fast, want, atol=1e-12)
    for name, a, b in zip(names, fast_grads, want_grads):
        assert torch.allclose(a, b, atol=1e-12), name
    if mode != "window":  # distances >= T get no gradient; every distance < T does
        grad_table = fast_grads[names.index("pos_weight")]
        assert torch.all(grad_table[:, T:] == 0) and torch.all(grad_table[:, :T] != 0)


def test_distance_weights_keeps_leading_dims():
    tables = torch.randn(2, H, P, dtype=torch.float64)  # e.g. (layers, heads, positions)
    w = distance_weights(tables, 5)
    assert w.shape == (2, H, 5, 5)
    for i in range(5):
        for j in range(5):
            assert torch.equal(w[..., i, j], tables[..., abs(i - j)])
