"""apace block components (ops-transformer `mc2/common/op_kernel/apace/block/`)."""
