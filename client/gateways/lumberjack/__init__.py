"""The Lumberjack gateway: acknowledged log ingest from Beats and Logstash senders (Lumberjack v1/v2)."""
