// The session page grows live: each entry follow() hands out after the ones the page shows
// is appended to the table (markup the server escaped), then the timeline is drawn again.
(function () {
  "use strict";
  const box = document.getElementById("live");
  if (!box) {
    return;
  }
  const query = new URLSearchParams(box.dataset.query); // the session, exactly
  let shown = Number(box.dataset.count);
  let drawing = Promise.resolve();
  const source = new EventSource("/session/events?" + query.toString());
  source.addEventListener("entry", function (event) {
    const data = JSON.parse(event.data);
    if (data.index < shown) {
      return; // on the page already
    }
    shown = data.index + 1;
    document.querySelector("#entries tbody").insertAdjacentHTML("beforeend", data.row);
    drawing = drawing.then(function () {
      return fetch("/session/svg?" + query.toString(), { credentials: "same-origin" })
        .then(function (answer) { return answer.text(); })
        .then(function (svg) { document.getElementById("timeline").innerHTML = svg; });
    });
  });
  source.addEventListener("end", function () {
    source.close();
    box.textContent = "the session is closed";
  });
})();
