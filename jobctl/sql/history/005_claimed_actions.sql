-- What a role that is not jobctl's claimed, kept apart from what the database saw.
--
-- The trigger records the declared actor (jobctl.actor) as the event's actor, and the
-- declared action (jobctl_action: requeued, manually_failed ...) as its kind, only when the
-- session's role is jobctl's: the table's owner or a member of it (superusers are members of
-- every role), or a member of a role granted UPDATE of jobctl_action by name, as `schema
-- grants --operator` does (a worker's table-wide UPDATE is no such grant). Any other role's
-- event is recorded with that role as its actor and the kind the change itself shows
-- (retried, status_changed ...); what it declared goes here, {"actor", "action", "reason"}
-- (the keys it set), so that jobctl explain can say who really did it.
ALTER TABLE jobctl.events
    ADD COLUMN claimed jsonb;
