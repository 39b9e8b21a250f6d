import unittest

import numpy as np

from optim import AdamW, clip_by_global_norm
from optim_ref import AdamW as AdamWRef
from optim_ref import clip_by_global_norm as clip_ref
from params import flatten, unflatten
from schedule import warmup_cosine
from schedule_ref import warmup_cosine as warmup_cosine_ref


def quadratic_grad(w, target):
    return 2.0 * (w - target)


class TestSchedule(unittest.TestCase):
    def test_matches_reference_everywhere(self):
        for step in range(0, 120):
            got = warmup_cosine(step, 3e-3, 10, 100, min_lr=1e-4)
            want = warmup_cosine_ref(step, 3e-3, 10, 100, min_lr=1e-4)
            self.assertAlmostEqual(got, want, places=15, msg=f"step {step}")

    def test_warmup_reaches_base_rate(self):
        self.assertAlmostEqual(warmup_cosine(9, 1.0, 10, 50), 1.0, places=12)
        self.assertAlmostEqual(warmup_cosine(0, 1.0, 10, 50), 0.1, places=12)


class TestClipping(unittest.TestCase):
    def test_matches_reference(self):
        rng = np.random.default_rng(0)
        grads = [rng.normal(size=(3, 4)) * 10, rng.normal(size=5)]
        for max_norm in (0.5, 1e6):
            got, norm = clip_by_global_norm(grads, max_norm)
            want, norm_ref = clip_ref(grads, max_norm)
            self.assertAlmostEqual(float(norm), float(norm_ref), places=10)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12)


class TestAdamW(unittest.TestCase):
    def run_both(self, weight_decay, steps=25):
        rng = np.random.default_rng(1)
        shapes_src = [rng.normal(size=(2, 3)), rng.normal(size=4)]
        w, shapes = flatten(shapes_src)
        target = rng.normal(size=w.shape)
        opt, ref = AdamW(lr=0.05, weight_decay=weight_decay), AdamWRef(lr=0.05, weight_decay=weight_decay)
        w_ref = w.copy()
        for step in range(steps):
            lr = warmup_cosine_ref(step, 0.05, 5, steps)
            w = opt.step(w, quadratic_grad(w, target), lr=lr)
            w_ref = ref.step(w_ref, quadratic_grad(w_ref, target), lr=lr)
            np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-12, err_msg=f"step {step}")
        self.assertEqual([a.shape for a in unflatten(w, shapes)], [(2, 3), (4,)])
        return w, target

    def test_trajectory_without_decay(self):
        self.run_both(0.0)

    def test_trajectory_with_decay(self):
        self.run_both(0.1)

    def test_first_step_is_sign_like(self):
        opt = AdamW(lr=0.1, weight_decay=0.0)
        w = opt.step(np.zeros(3), np.array([2.0, -0.5, 1e-3]))
        np.testing.assert_allclose(w, [-0.1, 0.1, -0.1], rtol=1e-4)


if __name__ == "__main__":
    unittest.main()
