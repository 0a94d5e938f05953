-- 015: turns an outside agent drives (over MCP or Kura's HTTP routes), not hashi.
-- Why: an outside agent's session lives in the same work tables, so aegis's approvals,
-- minato's completion rule, mikado's memory extraction and the console treat it as any other;
-- but minato must never accept its request again and no hashi worker may claim its turn.
-- `agent` names the agent identity (`agent:<name>`); NULL is Kura's own work.

ALTER TABLE requests ADD COLUMN agent TEXT;
ALTER TABLE turns ADD COLUMN agent TEXT;
CREATE INDEX idx_turns_agent ON turns(agent, state) WHERE agent IS NOT NULL;
