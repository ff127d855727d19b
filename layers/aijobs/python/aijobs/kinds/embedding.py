"""`embedding`: a text, or a batch `{"texts": [...]}`, -> one vector per text.

Vectors for search and clustering (docs/design.md §1's "batch embedding"; the `embedding-batch`
workflow pages a larger set into jobs of this kind).
"""

from __future__ import annotations

from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="embedding",
    capability="embedding",
    description="a vector per text (a string, or up to 100 texts as {'texts': [...]})",
    models={
        "bedrock": "amazon.titan-embed-text-v2:0",
        "openai": "text-embedding-3-small",
        "local": "local-embedding-1",
    },
    # Titan Text Embeddings V2 takes 50,000 characters per text; one call per text.
    inputs=Inputs(max_chars=50_000, list_field="texts", max_items=100),
    price=1,
)
