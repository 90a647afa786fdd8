"""Serving translation models: LibreTranslate's HTTP API, batching across requests, paragraphs in and out."""
