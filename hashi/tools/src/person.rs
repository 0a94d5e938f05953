//! `person.ask {question, choices?}`: the model asks the people who oversee it a question and
//! waits — without holding a worker, as for an approval — for a person's signed answer. The
//! gate always asks people about it; the answer arrives as the `answer` argument of their
//! approval with edited arguments (`aegis answer`, the console), and running the tool returns
//! it. A question the model answers itself is refused when it is filed.

use serde_json::{Map, Value, json};

use super::{Effect, Tool, ToolError, Workspace};

/// `person.ask`.
pub struct Ask;

impl Tool for Ask {
    fn name(&self) -> &str {
        proto::content::PERSON_ASK
    }
    fn effect(&self) -> Effect {
        // Asking changes nothing; the gate puts every question to people whatever its class.
        Effect::Read
    }
    fn description(&self) -> &str {
        "Ask the people who oversee you a question (optionally with choices) and wait for their answer."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "question": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "string"}}
        }, "required": ["question"]})
    }
    fn run(&self, _ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        match args.get("answer") {
            Some(answer @ Value::String(_)) => {
                let mut result = Map::new();
                result.insert("answer".into(), answer.clone());
                Ok(Value::Object(result))
            }
            _ => Err(ToolError::Refused(
                "approved without an answer: nobody answered the question (answer it with `aegis answer ID TEXT` or in the console)"
                    .into(),
            )),
        }
    }
}
