import json
import unittest

import numpy as np

from attention.core import MultiHeadAttention, attend, causal_mask, softmax
from attention.core_ref import MultiHeadAttention as MultiHeadAttentionRef
from attention.core_ref import attend as attend_ref
from attention.core_ref import causal_mask as causal_mask_ref
from attention.core_ref import softmax as softmax_ref

# Read relative to the working directory, as the published harness runs tests from the paper folder.
with open("data/cases.json") as f:
    CASES = json.load(f)


class TestSoftmax(unittest.TestCase):
    def test_matches_reference(self):
        x = np.random.default_rng(0).normal(size=(4, 6)) * 5
        for axis in (0, 1, -1):
            np.testing.assert_allclose(softmax(x, axis=axis), softmax_ref(x, axis=axis), rtol=1e-12)

    def test_large_logits_stay_finite(self):
        x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
        out = softmax(x)
        self.assertTrue(np.all(np.isfinite(out)))
        np.testing.assert_allclose(out, softmax_ref(x), rtol=1e-12)


class TestCausalMask(unittest.TestCase):
    def test_square_and_rectangular(self):
        for n, m in ((1, 1), (4, 4), (3, 5), (2, 6)):
            got = causal_mask(n, m)
            self.assertIsInstance(got, np.ndarray)
            np.testing.assert_array_equal(got, causal_mask_ref(n, m))


class TestAttend(unittest.TestCase):
    def test_cases(self):
        for case in CASES:
            rng = np.random.default_rng(case["seed"])
            q, k, v = (rng.normal(size=(case["batch"], case["n"], case["dim"])) for _ in range(3))
            got = attend(q, k, v, causal=case["causal"], temperature=case["temperature"])
            want = attend_ref(q, k, v, causal=case["causal"], temperature=case["temperature"])
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

    def test_causal_first_query_sees_only_first_key(self):
        rng = np.random.default_rng(7)
        q, k, v = (rng.normal(size=(1, 4, 3)) for _ in range(3))
        out = attend(q, k, v, causal=True)
        np.testing.assert_allclose(out[0, 0], v[0, 0], rtol=1e-12)


class TestMultiHead(unittest.TestCase):
    def test_split_merge(self):
        mha = MultiHeadAttention(12, 3, seed=0)
        ref = MultiHeadAttentionRef(12, 3, seed=0)
        x = np.random.default_rng(1).normal(size=(2, 5, 12))
        split = mha.split_heads(x)
        np.testing.assert_array_equal(split, ref.split_heads(x))
        np.testing.assert_array_equal(mha.merge_heads(split), x)

    def test_cases(self):
        for case in CASES:
            mha = MultiHeadAttention(case["dim"], case["heads"], seed=case["seed"])
            ref = MultiHeadAttentionRef(case["dim"], case["heads"], seed=case["seed"])
            x = np.random.default_rng(case["seed"] + 100).normal(size=(case["batch"], case["n"], case["dim"]))
            got = mha(x, causal=case["causal"], temperature=case["temperature"])
            want = ref(x, causal=case["causal"], temperature=case["temperature"])
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


if __name__ == "__main__":
    unittest.main()
