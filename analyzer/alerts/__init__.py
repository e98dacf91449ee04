"""Alerts as events: the lifecycle book that emits them and the fold that reads them back."""
