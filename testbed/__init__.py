"""What the tests and the benchmarks both run against: a real registry, private and fake-GPU Docker
engines, imagekit in a process of its own, the matrices and sample projects they build, the waivers
those need, and the counting of what an image's manifests and layers hold.

testbed imports neither tests nor bench, and tests and bench never import each other
(tests/unit/test_layers.py). Never shipped: the wheel holds imagekit only (pyproject.toml).
"""
