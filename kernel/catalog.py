"""The seed catalog: seven chip types, their launch prices, pools and nodes.

Prices for RTX 4090, TPU v5e and Ascend 910B come from the source article; the others are
plausible values that the operator edits in the admin. Specs are public dense bf16 figures.
"""

from __future__ import annotations

from decimal import Decimal

# slug, name, vendor, family, memory GiB, bf16 TFLOPS, bandwidth GB/s, stack, default MFU,
# on-demand ¥/h, spot floor ¥/h
CHIP_TYPES = [
    ("rtx-4090", "NVIDIA RTX 4090", "NVIDIA", "gpu", 24, "165.2", 1008, "cuda", "0.350", "1.20", "0.50"),
    ("a100-80g", "NVIDIA A100 80G", "NVIDIA", "gpu", 80, "312.0", 2039, "cuda", "0.450", "4.50", "1.80"),
    ("h100-80g", "NVIDIA H100 80G", "NVIDIA", "gpu", 80, "989.0", 3350, "cuda", "0.400", "9.80", "3.90"),
    ("tpu-v4", "Google TPU v4", "Google", "tpu", 32, "275.0", 1228, "xla", "0.500", "3.60", "1.20"),
    ("tpu-v5e", "Google TPU v5e", "Google", "tpu", 16, "197.0", 819, "xla", "0.450", "2.80", "0.80"),
    (
        "ascend-910b",
        "Huawei Ascend 910B",
        "Huawei",
        "npu",
        64,
        "320.0",
        1600,
        "cann",
        "0.350",
        "1.50",
        "0.60",
    ),
    ("mlu370", "Cambricon MLU370-X8", "Cambricon", "npu", 48, "96.0", 614, "bang", "0.300", "0.90", "0.35"),
]

ZONE = "cn-east-1"

# Seeded (simulated) nodes per chip type until real agents enroll: (chips per node, spot eligible).
SEED_NODES = {
    "rtx-4090": [(8, False), (8, True)],
    "a100-80g": [(8, False)],
    "h100-80g": [(8, False)],
    "tpu-v4": [(4, True)],
    "tpu-v5e": [(4, False), (4, True)],
    "ascend-910b": [(8, False), (8, True)],
    "mlu370": [(8, True)],
}


def chip_specs() -> list[dict]:
    keys = [
        "slug",
        "name",
        "vendor",
        "family",
        "memory_gib",
        "bf16_tflops",
        "memory_bandwidth_gbps",
        "software_stack",
        "default_mfu",
    ]
    rows = []
    for order, row in enumerate(CHIP_TYPES):
        spec = dict(zip(keys, row[:9], strict=True))
        spec["bf16_tflops"] = Decimal(spec["bf16_tflops"])
        spec["default_mfu"] = Decimal(spec["default_mfu"])
        spec["sort_order"] = order
        spec["on_demand"], spec["spot_floor"] = row[9], row[10]
        rows.append(spec)
    return rows
