"""Stage 1, plan: matrix.yaml to a Plan of cells (schema, include/exclude, resolution under the rules, the
cell records, ids and tags, which GPUs a cell serves)."""
