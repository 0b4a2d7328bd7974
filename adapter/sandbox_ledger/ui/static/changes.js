// The change feed page: each change the server hands out (markup it escaped) is appended.
(function () {
  "use strict";
  const table = document.querySelector("#changes tbody");
  if (!table) {
    return;
  }
  const status = document.getElementById("feed");
  let count = 0;
  const source = new EventSource("/changes/events");
  source.addEventListener("change", function (event) {
    table.insertAdjacentHTML("beforeend", JSON.parse(event.data).row);
    count += 1;
    status.textContent = count + " change(s) so far; live";
  });
})();
