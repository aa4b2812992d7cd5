"""Stored responses: the Responses API's ``store``, ``previous_response_id``, retrieve, delete
and input items, kept per tenant in the gateway's store (SQLite or PostgreSQL, the ledger's).

``items`` (pure: input items with ids, a stored response's conversation, pages of items),
``schema`` (the table and its migrations), ``store`` (the SQL store), ``service`` (what the
pipeline calls: a request's turn rebuilt and kept once finished; expiry in the background) and
``api`` (the routes).
"""
