// Where the atlas page leaves its last atlas ({id, model}) for the single-prompt head labels to compare.
export const ATLAS_KEY = "attention-lab-atlas";
