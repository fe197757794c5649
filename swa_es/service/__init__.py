"""What the long-running commands share: opening logs, the standard follower views, /metrics
(``http`` serves what ``prometheus`` renders from ``service_metrics``), status files and
signal handling.
"""
