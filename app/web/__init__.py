"""The web layer: routes, schemas, pages and middleware. No model code here."""
