"""The front-end check (/opt/imagekit/frontend_check.py): jupyter and ssh images proven to work and
locked down; ``run`` runs the checks, one module per front end beside the ones both share."""
