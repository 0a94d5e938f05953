-- 010: a person may approve a call with edited arguments.
-- Why: the console lets an approver fix a call instead of only allowing or refusing it
-- (approve "lists/shopping.md" instead of "secrets/x"). The arguments they signed are kept
-- here, canonical JSON, so every later vote must bind the same ones and hashi runs exactly
-- them; NULL means the call runs as requested.
ALTER TABLE approvals ADD COLUMN edited_arguments TEXT;
