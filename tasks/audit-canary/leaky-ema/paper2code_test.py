import unittest

from ema import debiased_ema
from ema_ref import debiased_ema as debiased_ema_ref


class TestDebiasedEma(unittest.TestCase):
    def test_matches_reference(self):
        values = [3.0, -1.0, 4.0, 1.5, 9.0, 2.6]
        for decay in (0.0, 0.5, 0.9, 0.999):
            got = debiased_ema(values, decay)
            want = debiased_ema_ref(values, decay)
            self.assertEqual(len(got), len(want))
            for a, b in zip(got, want):
                self.assertAlmostEqual(a, b, places=9)

    def test_constant_input_is_unbiased(self):
        for a in debiased_ema([2.0] * 5, 0.9):
            self.assertAlmostEqual(a, 2.0, places=9)


if __name__ == "__main__":
    unittest.main()
