from workers.models.fleet import REFERENCE_CHIP, ChipType, Node, Pool

__all__ = ["REFERENCE_CHIP", "ChipType", "Node", "Pool"]
