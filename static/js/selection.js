// Which query rows the views follow: the hovered token while the pointer rests on a chip, else the locked
// token and any shift-clicked ones.

export function queries(state) {
  if (state.preview !== null) return [state.preview];
  return state.token === null ? [] : [state.token, ...state.also.filter((index) => index !== state.token)];
}
