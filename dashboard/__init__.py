"""Streamlit + Plotly dashboard over Prometheus and the load-run store."""
