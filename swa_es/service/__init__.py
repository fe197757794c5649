"""What the long-running commands share: opening logs, the standard follower views, /metrics
(``http_app`` serves what ``prometheus_client`` renders from ``service_metrics`` and
``http_metrics``, every metric declared once in ``metric_table``), status files and signal
handling.
"""
