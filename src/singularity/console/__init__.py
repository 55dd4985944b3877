"""The operator console: a web application to watch, talk to and steer beings."""
