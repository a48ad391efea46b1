"""The tools that refresh what imagekit records from the registries, each run as ``python -m``:
``imagekit.refresh.compat`` (data/compat.yaml), ``imagekit.refresh.cuda_wheels``
(data/cuda_wheels.yaml), ``imagekit.refresh.crd_schema`` (the CRD schemas the tests validate the
admission policies against)."""
