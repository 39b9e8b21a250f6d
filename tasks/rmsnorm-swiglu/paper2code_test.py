import unittest

import torch

from block import PreNormBlock, RMSNorm, SwiGLU, scale_residual_init, swiglu_hidden_dim
from block_ref import PreNormBlock as PreNormBlockRef
from block_ref import RMSNorm as RMSNormRef
from block_ref import SwiGLU as SwiGLURef
from block_ref import scale_residual_init as scale_residual_init_ref
from block_ref import swiglu_hidden_dim as swiglu_hidden_dim_ref

torch.manual_seed(0)


def copy_weights(dst, src):
    dst.load_state_dict(src.state_dict())
    return dst


class TestHiddenDim(unittest.TestCase):
    def test_rule(self):
        for dim in (8, 48, 64, 100, 512):
            for multiple in (1, 16, 64):
                self.assertEqual(swiglu_hidden_dim(dim, multiple), swiglu_hidden_dim_ref(dim, multiple))


class TestModules(unittest.TestCase):
    def test_rmsnorm(self):
        x = torch.randn(3, 5, 16) * 4
        ref = RMSNormRef(16)
        with torch.no_grad():
            ref.weight.copy_(torch.linspace(0.5, 1.5, 16))
        norm = copy_weights(RMSNorm(16), ref)
        torch.testing.assert_close(norm(x), ref(x), rtol=1e-6, atol=1e-6)

    def test_swiglu(self):
        x = torch.randn(2, 7, 16)
        ref = SwiGLURef(16, 40)
        mlp = copy_weights(SwiGLU(16, 40), ref)
        torch.testing.assert_close(mlp(x), ref(x), rtol=1e-6, atol=1e-6)

    def test_block(self):
        x = torch.randn(2, 4, 32)
        ref = PreNormBlockRef(32, multiple_of=16)
        block = copy_weights(PreNormBlock(32, multiple_of=16), ref)
        torch.testing.assert_close(block(x), ref(x), rtol=1e-6, atol=1e-6)

    def test_scaled_init(self):
        block = PreNormBlock(32, multiple_of=16)
        ref = copy_weights(PreNormBlockRef(32, multiple_of=16), block)
        out = scale_residual_init(block, 6, torch.Generator().manual_seed(3))
        self.assertIs(out, block)
        scale_residual_init_ref(ref, 6, torch.Generator().manual_seed(3))
        torch.testing.assert_close(block.mlp.w_down.weight, ref.mlp.w_down.weight)


if __name__ == "__main__":
    unittest.main()
