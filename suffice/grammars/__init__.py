"""What every gate's constraint is built from: regex algebra, segments, the decision-only form, routes."""
