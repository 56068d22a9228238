"""A convolution as a matrix multiply (im2col): its FLOPs, its bytes, and where it sits on the roofline (lesson 09).

``im2col`` copies every receptive field of the input into a column: an input ``(N, C, H, W)`` and a
``k_h x k_w`` filter give a matrix of ``C k_h k_w`` rows and ``N H_out W_out`` columns; the filters,
``(C_out, C k_h k_w)``, multiply it in one GEMM -- how Caffe ran convolutions, and what Paleo prices
every convolution as with ``--use_only_gemm`` (Chellapilla, Puri & Simard 2006 introduced the unrolling).

* FLOPs: ``2 x C_out x (C k_h k_w) x (N H_out W_out)``, the direct convolution's count;
* bytes: the direct convolution reads the input and the filters and writes the output; im2col also
  writes the column matrix and reads it back, ``k_h k_w / (s_h s_w)`` times the input (for stride 1, a
  3x3 filter makes it 9 times the input): more traffic for the same FLOPs, lower arithmetic intensity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def conv2d_im2col(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1,
                  padding=0) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding)`` computed as ``weight_matrix @ im2col(x)``."""
    n, _, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    cols = F.unfold(x, (kh, kw), padding=(ph, pw), stride=(sh, sw))  # (N, C kh kw, H_out W_out)
    h_out, w_out = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = weight.reshape(c_out, -1) @ cols  # (C_out, C kh kw) @ (N, C kh kw, L) -> (N, C_out, L)
    if bias is not None:
        out = out + bias[:, None]
    return out.reshape(n, c_out, h_out, w_out)


def conv_costs(n: int, c: int, h: int, w: int, c_out: int, kh: int, kw: int, stride: int = 1, padding: int = 0,
               bytes_per_value: int = 4) -> dict:
    """The GEMM's shape ``(M, K, N)``, FLOPs, and bytes moved by the direct convolution and by im2col + GEMM,
    with each one's arithmetic intensity (FLOPs per byte)."""
    if min(n, c, h, w, c_out, kh, kw, stride) < 1 or padding < 0:
        raise ValueError("sizes, kernel and stride must be >= 1 and padding >= 0")
    h_out, w_out = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    if h_out < 1 or w_out < 1:
        raise ValueError(f"a {kh}x{kw} filter does not fit a {h}x{w} input padded by {padding}")
    m, k, cols = c_out, c * kh * kw, n * h_out * w_out
    flops = 2 * m * k * cols
    inp, filt, out = n * c * h * w, c_out * k, n * c_out * h_out * w_out
    direct = (inp + filt + out) * bytes_per_value
    column = k * cols * bytes_per_value
    gemm = direct + 2 * column  # the columns written by im2col, then read by the GEMM
    return {"gemm_mkn": (m, k, cols), "flops": flops, "direct_bytes": direct, "im2col_bytes": gemm,
            "column_bytes": column, "direct_intensity": flops / direct, "im2col_intensity": flops / gemm}


def roofline_bound(intensity: float, peak_flops: float, bandwidth: float) -> tuple[str, float]:
    """``(bound, attainable FLOP/s)`` at ``intensity`` FLOPs per byte: ``min(peak, intensity x bandwidth)``."""
    attainable = min(peak_flops, intensity * bandwidth)
    return ("compute" if intensity * bandwidth >= peak_flops else "memory"), attainable
