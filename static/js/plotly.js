// plotly.js is 4.7 MB: it is fetched the first time a view draws a chart, never for the first screen.

let loading = null;

export function loadPlotly() {
  loading ??= new Promise((resolve, reject) => {
    const script = Object.assign(document.createElement("script"), { src: "/vendor/plotly.min.js" });
    script.addEventListener("load", () => resolve(window.Plotly));
    script.addEventListener("error", () => {
      loading = null; // a failed fetch may be tried again
      reject(new Error("The charts could not be loaded. Is the lab server still running?"));
    });
    document.head.append(script);
  });
  return loading;
}
