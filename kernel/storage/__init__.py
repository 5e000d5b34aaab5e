"""Object storage for datasets, uploaded models, checkpoints and artifacts.

One interface (`Store`), two backends: a local directory (`make run`'s default) and S3-compatible
object storage through boto3. The platform, the node agents and the training ranks all use it, so
hosts share nothing but the network: no module here imports Django or torch.

    STORAGE_URL=file:///srv/starverse/storage      a directory (the platform's default: DATA_DIR/storage)
    STORAGE_URL=s3://bucket/prefix                 S3; endpoint and keys from the standard AWS_ENDPOINT_URL,
                                                   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION

A folder of files is stored as a *tree*: its files under a prefix and `manifest.json` (each file's
size and SHA-256) written last, so a tree without its manifest does not exist (`trees.py`). Hosts
read trees through a content-addressed, size-capped, hash-verified cache (`cache.py`).
"""

from kernel.storage.base import ObjectMissing, StorageError, Store, StoredObject, check_key
from kernel.storage.factory import open_store, store_from_environment

__all__ = [
    "ObjectMissing",
    "StorageError",
    "Store",
    "StoredObject",
    "check_key",
    "open_store",
    "store_from_environment",
]
