"""Data access: DynamoDB tables (meta + tenant shards), S3 results. Key layout: store/keys.py."""
