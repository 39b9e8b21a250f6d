import unittest

from stats import affine, weighted_mean


class TestWeightedMean(unittest.TestCase):
    # strong: several inputs, weights that do not sum to one, a negative value
    def test_values(self):
        self.assertAlmostEqual(weighted_mean([1.0, 2.0, 4.0], [1.0, 1.0, 2.0]), 2.75)
        self.assertAlmostEqual(weighted_mean([3.0, -1.0], [0.5, 1.5]), 0.0)
        self.assertAlmostEqual(weighted_mean([5.0], [3.0]), 5.0)


class TestAffine(unittest.TestCase):
    # deliberately weak: one input, and its offset is zero
    def test_value(self):
        self.assertAlmostEqual(affine(2.0, 3.0, 0.0), 6.0)


if __name__ == "__main__":
    unittest.main()
